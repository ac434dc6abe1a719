import type { Message, Producer } from 'kafkajs';

type TopicMessages = { topic: string; messages: Message[] }[];

interface Waiting {
  batch: TopicMessages;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * Many small produces as few requests: while one sendBatch is in flight,
 * everything sent meanwhile waits and goes out together in the next one
 * (acks from all in-sync replicas). Each caller learns its request's outcome.
 */
export class CoalescingSender {
  readonly #producer: Producer;
  #queue: Waiting[] = [];
  #busy = false;

  constructor(producer: Producer) {
    this.#producer = producer;
  }

  send(batch: TopicMessages): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ batch, resolve, reject });
      if (!this.#busy) void this.#loop();
    });
  }

  async #loop(): Promise<void> {
    this.#busy = true;
    try {
      while (this.#queue.length > 0) {
        const group = this.#queue.splice(0, 500);
        const byTopic = new Map<string, Message[]>();
        for (const w of group) {
          for (const { topic, messages } of w.batch) {
            const list = byTopic.get(topic) ?? [];
            list.push(...messages);
            byTopic.set(topic, list);
          }
        }
        try {
          await this.#producer.sendBatch({ acks: -1, topicMessages: [...byTopic].map(([topic, messages]) => ({ topic, messages })) });
          for (const w of group) w.resolve();
        } catch (err) {
          for (const w of group) w.reject(err);
        }
      }
    } finally {
      this.#busy = false;
    }
  }
}
