import type { Admin, Consumer, EachBatchPayload, Producer } from 'kafkajs';
import { InvalidOptionsError } from '../core/errors.js';
import { describeError } from '../core/logger.js';
import { InboxEngine, type HeldMessage } from '../broker/inbox-engine.js';
import { InboxLifecycle } from '../broker/inbox-lifecycle.js';
import type { Inbox, InboxStopOptions } from '../broker/inbox-types.js';
import { defaultMapper, HEADERS } from '../broker/broker-message.js';
import { checkInboxBase, INBOX_DEFAULTS, type InboxOptionsBase } from '../broker/broker-options.js';
import { checkBrokers, checkTopic, kafkaClient, kafkaError } from './kafka-connection.js';
import { inboundOf } from './kafka-message.js';
import { InOrderOffsets } from './kafka-offsets.js';

/**
 * The Kafka inbox: a consumer group's records turned into events of the bus, one store transaction per batch of
 * messages, the partition's offset committed only after the events are committed (see `broker/inbox-engine.ts`).
 * A crash between the two makes Kafka hand the records out again; publishing the same event id again is a duplicate
 * that adds no delivery a handler already had, so a redelivery changes nothing.
 *
 * Kafka acknowledges by offset, per partition: each fetched batch of a partition goes to the engine whole and the
 * inbox waits until every record of it is settled (committed as an event, or dead-lettered), releasing offsets in
 * order (`InOrderOffsets`), then commits. Partitions run side by side (`concurrency`); one partition's batches run one
 * after the other, so one key (one partition) is published in partition order. A poison record (no id, unknown type,
 * a payload that breaks its schema, an id taken by another event) is produced to the dead-letter topic with its reason
 * in headers, then counts as settled; without a dead-letter topic it is logged and skipped (Kafka cannot hold one
 * record back). Stopping gives unsettled records back: their partition is read again from the first of them.
 */

export interface KafkaInboxDeclare {
  /** Partitions of each topic the inbox creates when it is missing. Default 1. */
  readonly partitions?: number;
  /** Replication factor of the topics it creates. Default 1. */
  readonly replicationFactor?: number;
}

export interface KafkaInboxOptions<TTx> extends InboxOptionsBase<TTx> {
  /** `host:9092`, or a list (or a comma-separated string). */
  readonly brokers: string | readonly string[];
  /** The topic(s) to consume. */
  readonly topics: string | readonly string[];
  /** The consumer group: the inbox's durable name, as a durable consumer in JetStream. */
  readonly groupId: string;
  /** Poison records are produced here, with their reason in `relaybus-dead-*` headers. */
  readonly deadLetter?: { readonly topic: string };
  /** Create missing topics (the consumed ones and the dead-letter topic) on start. */
  readonly declare?: KafkaInboxDeclare;
  /** A new group starts at the earliest record (default true: an inbox that skipped records would lose events). */
  readonly fromBeginning?: boolean;
  /** The client id Kafka sees. Default `relaybus-inbox-<groupId>`. */
  readonly clientId?: string;
}

/** How often a partition's batch tells the group coordinator it is alive while its records are being committed. */
const HEARTBEAT_MS = 3_000;

class KafkaInbox<TTx> extends InboxLifecycle {
  readonly name: string;
  readonly #options: KafkaInboxOptions<TTx>;
  readonly #brokers: string[];
  readonly #topics: string[];
  readonly #broker: string;
  #engine: InboxEngine<TTx> | undefined;
  #consumer: Consumer | undefined;
  #producer: Producer | undefined;
  #connected = false;
  #everConnected = false;
  /** Batches waiting for their records to settle: a stop ends their waits. */
  readonly #waits = new Set<() => void>();

  constructor(options: KafkaInboxOptions<TTx>, brokers: string[], topics: string[]) {
    super(options.logger);
    this.#options = options;
    this.#brokers = brokers;
    this.#topics = topics;
    this.#broker = brokers.join(', ');
    this.name = `kafka ${topics.join(',')} (group ${options.groupId})`;
  }

  protected isConnected(): boolean {
    return this.#connected;
  }

  protected async open(): Promise<void> {
    const options = this.#options;
    if (options.setupStore !== false) await options.bus.store.setup();
    const kafka = kafkaClient(
      this.#brokers,
      options.clientId ?? `relaybus-inbox-${options.groupId}`,
      options.connectTimeoutMs ?? INBOX_DEFAULTS.connectTimeoutMs,
    );
    const admin = kafka.admin();
    try {
      await admin.connect();
    } catch (error) {
      throw kafkaError(error, 'connecting', this.#brokers);
    }
    try {
      await this.#declareOrCheck(admin);
    } finally {
      await admin.disconnect().catch(() => {});
    }
    const concurrency = options.concurrency ?? INBOX_DEFAULTS.concurrency;
    this.#engine = new InboxEngine<TTx>({
      bus: options.bus,
      map: options.map ?? defaultMapper(options.events ?? []),
      logger: this.logger,
      emitter: this.emitter,
      batchSize: options.batchSize ?? INBOX_DEFAULTS.batchSize,
      concurrency,
      workingIntervalMs: HEARTBEAT_MS,
    });
    if (options.deadLetter !== undefined) {
      this.#producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1 });
      await this.#producer.connect().catch((error: unknown) => {
        throw kafkaError(error, 'connecting the dead-letter producer', this.#brokers);
      });
    }
    const consumer = kafka.consumer({ groupId: options.groupId, allowAutoTopicCreation: false });
    this.#consumer = consumer;
    consumer.on(consumer.events.CONNECT, () => {
      this.#connected = true;
      this.emitter.emit('connected', { broker: this.#broker, reconnect: this.#everConnected });
      this.#everConnected = true;
    });
    consumer.on(consumer.events.DISCONNECT, () => {
      this.#connected = false;
    });
    consumer.on(consumer.events.CRASH, ({ payload }) => {
      this.#connected = false;
      this.lastError = describeError(payload.error);
      this.emitter.emit('disconnected', { broker: this.#broker, error: payload.error, retryInMs: 0 });
      this.logger.warn(`consuming ${this.name} failed${payload.restart ? '; the consumer restarts' : ''}`, {
        error: describeError(payload.error),
      });
    });
    try {
      await consumer.connect();
      await consumer.subscribe({ topics: this.#topics, fromBeginning: options.fromBeginning ?? true });
    } catch (error) {
      await consumer.disconnect().catch(() => {});
      await this.#producer?.disconnect().catch(() => {});
      throw kafkaError(error, `subscribing group "${options.groupId}" to ${this.#topics.join(', ')}`, this.#brokers);
    }
    this.state = 'running';
    await consumer.run({
      autoCommit: true,
      autoCommitThreshold: 1,
      eachBatchAutoResolve: false,
      partitionsConsumedConcurrently: concurrency,
      eachBatch: (payload) => this.#onBatch(payload),
    });
    this.logger.info(`consuming ${this.name} on Kafka at ${this.#broker}`);
  }

  protected async close(options: InboxStopOptions): Promise<void> {
    // No new batches while the held records finish (a batch returned unresolved would only be fetched again).
    try {
      this.#consumer?.pause(this.#topics.map((topic) => ({ topic })));
    } catch {
      // not running
    }
    await this.#engine?.drain(options.graceMs ?? this.#options.shutdownGraceMs ?? INBOX_DEFAULTS.shutdownGraceMs);
    for (const wake of this.#waits) wake();
    await this.#consumer?.disconnect().catch(() => {});
    await this.#producer?.disconnect().catch(() => {});
    this.#connected = false;
  }

  async #declareOrCheck(admin: Admin): Promise<void> {
    const { declare, deadLetter } = this.#options;
    const wanted = deadLetter === undefined ? this.#topics : [...this.#topics, deadLetter.topic];
    if (declare !== undefined) {
      const existing = new Set(await admin.listTopics());
      const missing = wanted.filter((topic) => !existing.has(topic));
      if (missing.length > 0) {
        await admin
          .createTopics({
            waitForLeaders: true,
            topics: missing.map((topic) => ({
              topic,
              numPartitions: declare.partitions ?? 1,
              replicationFactor: declare.replicationFactor ?? 1,
            })),
          })
          .catch((error: unknown) => {
            throw kafkaError(error, `creating topic(s) ${missing.join(', ')}`, this.#brokers);
          });
      }
    }
    try {
      await admin.fetchTopicMetadata({ topics: wanted });
    } catch (error) {
      throw kafkaError(error, `topic(s) ${wanted.join(', ')}`, this.#brokers);
    }
  }

  /** One fetched batch of a partition: every record to the engine, wait until all settled, offsets released in order. */
  async #onBatch({ batch, resolveOffset, heartbeat, isRunning, isStale, commitOffsetsIfNecessary }: EachBatchPayload) {
    const engine = this.#engine;
    if (engine === undefined || this.state !== 'running' || batch.messages.length === 0) return;
    const offsets = new InOrderOffsets(batch.messages.map((record) => record.offset));
    let closed = false;
    let wake: () => void = () => {};
    const settled = (released: readonly string[]) => {
      if (!closed) for (const offset of released) resolveOffset(offset);
      if (offsets.done) wake();
    };
    let lastBeat = Date.now();
    const beat = () => {
      if (closed || Date.now() - lastBeat < HEARTBEAT_MS) return;
      lastBeat = Date.now();
      heartbeat().catch(() => {});
    };
    batch.messages.forEach((record, index) => {
      const message = inboundOf(record, batch.topic, batch.partition);
      const held: HeldMessage = {
        message,
        ack: () => settled(offsets.settle(index)),
        requeue: () => {
          offsets.giveBack(index);
          settled([]);
        },
        working: beat,
        deadLetter: async (reason, detail) => {
          await this.#deadLetter(record.value, record.key, message.source, reason, detail, record.headers);
          settled(offsets.settle(index));
        },
      };
      engine.push(held);
    });
    await new Promise<void>((resolve) => {
      wake = resolve;
      this.#waits.add(resolve);
      if (offsets.done || !isRunning() || isStale()) resolve();
    });
    closed = true;
    this.#waits.delete(wake);
    if (!isStale()) await commitOffsetsIfNecessary().catch(() => {});
  }

  async #deadLetter(
    value: Buffer | null,
    key: Buffer | null,
    source: string,
    reason: string,
    detail: string,
    headers: Readonly<Record<string, unknown>> | undefined,
  ): Promise<void> {
    const topic = this.#options.deadLetter?.topic;
    if (topic === undefined || this.#producer === undefined) {
      this.logger.error(`a record of ${this.name} cannot be published and there is no dead-letter topic; skipped`, {
        source,
        reason,
        detail,
      });
      return;
    }
    const copied: Record<string, string | Buffer> = {};
    for (const [name, header] of Object.entries(headers ?? {})) {
      if (typeof header === 'string' || Buffer.isBuffer(header)) copied[name] = header;
    }
    copied[HEADERS.deadReason] = reason;
    copied[HEADERS.deadDetail] = detail.replace(/[\r\n]+/g, ' ');
    copied[HEADERS.deadSource] = source;
    try {
      await this.#producer.send({ topic, acks: -1, messages: [{ key, value, headers: copied }] });
    } catch (error) {
      throw kafkaError(error, `dead-letter topic "${topic}"`, this.#brokers);
    }
  }
}

/**
 * An inbox on Kafka topics, as a consumer group.
 *
 * ```ts
 * const inbox = kafkaInbox({ bus, brokers: ['localhost:9092'], topics: 'orders', groupId: 'orders-b',
 *   events: [OrderPlaced], deadLetter: { topic: 'orders.dead' } });
 * await inbox.start();
 * ```
 */
export function kafkaInbox<TTx>(options: KafkaInboxOptions<TTx>): Inbox {
  const where = 'kafkaInbox';
  if (typeof options !== 'object' || options === null)
    throw new InvalidOptionsError(`${where}: options are required: { bus, brokers, topics, groupId, events }.`);
  const brokers = checkBrokers(options.brokers, where);
  const topicList = typeof options.topics === 'string' ? [options.topics] : options.topics;
  if (!Array.isArray(topicList) || topicList.length === 0)
    throw new InvalidOptionsError(`${where}: \`topics\` is required: a topic name or a list of them.`);
  const topics = topicList.map((topic) => checkTopic(topic, where, 'topics'));
  if (options.deadLetter !== undefined) checkTopic(options.deadLetter.topic, where, 'deadLetter.topic');
  if (typeof options.groupId !== 'string' || options.groupId.trim() === '' || options.groupId.length > 255)
    throw new InvalidOptionsError(
      `${where}: \`groupId\` is required: the consumer group's name, got ${JSON.stringify(options.groupId)}.`,
    );
  checkInboxBase(where, options, 'topics');
  return new KafkaInbox(options, brokers, topics);
}
