/**
 * Child process of the benchmark: the intake's HTTP passthrough baseline
 * (issue 9, item 1). A minimal Fastify app on 127.0.0.1 (port chosen by the
 * OS, as the stack's is) with one route, POST /v1/collect, that lets Fastify
 * parse the same JSON body and produces every event, as its JSON text, to the
 * same topic with acks=-1: no validation, no Avro, no transaction, no auth.
 * Key tenant:session as the intake's, so partitioning is the same.
 *
 * Env: PT_BROKERS (comma-separated), PT_TOPIC, PT_TENANT, PT_BODY_LIMIT.
 * IPC: sends { type: 'ready', url } once listening; answers
 * { op: 'profileStart' } and { op: 'profileStop' } (the V8 profiler, as the
 * stack worker does, for the intake phase's per-event comparison) with
 * { type: 'profile', ... }; exits on disconnect.
 */
import Fastify from 'fastify';
import { Kafka, logLevel } from 'kafkajs';
import { JavaCompatiblePartitioner } from '../shared/kafka/partitioner.ts';
import { answerProfileRequests } from './inspector-profiler.ts';

const brokers = (process.env.PT_BROKERS ?? '').split(',').filter(Boolean);
const topic = process.env.PT_TOPIC ?? '';
const tenant = process.env.PT_TENANT ?? 'passthrough';

async function main(): Promise<void> {
  const kafka = new Kafka({ brokers, clientId: 'bench-passthrough', logLevel: logLevel.ERROR });
  const producer = kafka.producer({ createPartitioner: JavaCompatiblePartitioner });
  await producer.connect();
  const app = Fastify({ logger: false, bodyLimit: Number(process.env.PT_BODY_LIMIT ?? 1_048_576) });
  app.post('/v1/collect', async (req, reply) => {
    const events = (req.body as { events?: { session_id?: string }[] }).events ?? [];
    await producer.send({
      topic,
      acks: -1,
      messages: events.map((e) => ({ key: `${tenant}:${e.session_id ?? ''}`, value: JSON.stringify(e) })),
    });
    return reply.code(202).send({ accepted: events.length });
  });
  const address = await app.listen({ host: '127.0.0.1', port: 0 });
  process.send?.({ type: 'ready', url: address });
  answerProfileRequests();
  process.on('disconnect', () => {
    void app
      .close()
      .then(() => producer.disconnect())
      .finally(() => process.exit(0));
  });
}

main().catch((err: unknown) => {
  process.stderr.write(`passthrough worker failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
