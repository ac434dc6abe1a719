import type { Admin } from 'kafkajs';
import type { Logger } from '../logger.ts';
import type { Metrics } from '../metrics.ts';

/**
 * Samples the lag of this process's consumer groups from the broker, the way
 * Burrow or kafka-consumer-groups.sh do: per partition, the high watermark
 * minus the group's committed offset (the whole partition when nothing is
 * committed yet). Exported as kafka_consumer_lag{group,topic,partition}; a
 * figure that is read from the broker stays true when a consumer stops
 * fetching, unlike one reported by the consumer itself.
 */
export class LagMonitor {
  readonly #admin: Admin;
  readonly #metrics: Metrics;
  readonly #log: Logger;
  readonly #groups = new Map<string, string[]>();
  #timer: NodeJS.Timeout | undefined;
  #sampling: Promise<void> | undefined;

  constructor(opts: { admin: Admin; metrics: Metrics; log: Logger }) {
    this.#admin = opts.admin;
    this.#metrics = opts.metrics;
    this.#log = opts.log.child({ component: 'lag-monitor' });
  }

  watch(groupId: string, topics: string[]): void {
    this.#groups.set(groupId, topics);
  }

  start(intervalMs = 5000): void {
    const tick = () => {
      this.#sampling = this.sample().finally(() => {
        this.#sampling = undefined;
        if (this.#timer) this.#timer = setTimeout(tick, intervalMs);
      });
    };
    this.#timer = setTimeout(tick, 0);
  }

  async stop(): Promise<void> {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    await this.#sampling;
  }

  /** One sample of every watched group, into the consumer-lag gauge. */
  async sample(): Promise<void> {
    const ends = new Map<string, Map<number, { low: bigint; high: bigint }>>();
    try {
      for (const topics of this.#groups.values()) {
        for (const topic of topics) {
          if (ends.has(topic)) continue;
          const offsets = await this.#admin.fetchTopicOffsets(topic);
          ends.set(topic, new Map(offsets.map((o) => [o.partition, { low: BigInt(o.low), high: BigInt(o.high) }])));
        }
      }
      for (const [groupId, topics] of this.#groups) {
        // One group the coordinator cannot answer for yet does not hide the others.
        const committed = await this.#admin.fetchOffsets({ groupId, topics }).catch((err: Error) => {
          this.#log.debug({ err: { message: err.message }, group: groupId }, 'lag_sample_failed');
          return [];
        });
        for (const { topic, partitions } of committed) {
          for (const { partition, offset } of partitions) {
            const end = ends.get(topic)?.get(partition);
            if (!end) continue;
            const from = BigInt(offset) < 0n ? end.low : BigInt(offset);
            const lag = Number(end.high > from ? end.high - from : 0n);
            this.#metrics.consumerLag.set({ group: groupId, topic, partition: String(partition) }, lag);
          }
        }
      }
    } catch (err) {
      this.#log.debug({ err: { message: (err as Error).message } }, 'lag_sample_failed');
    }
  }
}
