import type { Producer } from 'kafkajs';
import { InvalidOptionsError } from '../core/errors.js';
import { BrokerRejectedError } from '../broker/broker-errors.js';
import type { OutboundMessage } from '../broker/broker-message.js';
import { checkPositiveIntegers } from '../broker/broker-options.js';
import { routeValue, type RelayTarget, type RouteValue } from '../broker/relay.js';
import { checkBrokers, checkTopic, kafkaClient, kafkaError, kafkaSendError } from './kafka-connection.js';
import { recordOf } from './kafka-message.js';

/**
 * The Kafka side of the relay: one record per event (record key = ordering key, event id in the `relaybus-id`
 * header), sent by an idempotent producer with acks from every in-sync replica; `send` resolves once Kafka
 * acknowledged it. The idempotent producer drops its own retries of a record; a re-send after a crash (the relay
 * sent, then died before completing the delivery) is a second record with the same id, which every relaybus inbox
 * drops as a duplicate. Keyed events keep their order: one key, one partition, and keyed deliveries of one handler
 * run one at a time in commit order. A record Kafka refuses as such (too large, invalid) is a permanent failure: its
 * delivery is dead at once.
 */

/** Where a relayed event goes: a topic, fixed or from the message. */
export interface KafkaRoute {
  readonly topic: RouteValue;
}

export interface KafkaTargetOptions {
  /** `host:9092`, or a list (or a comma-separated string). */
  readonly brokers: string | readonly string[];
  /** The client id Kafka sees. Default `relaybus-relay`. */
  readonly clientId?: string;
  readonly connectTimeoutMs?: number;
  /** How long a send waits for Kafka's acknowledgement. Default 30 s. */
  readonly timeoutMs?: number;
}

class KafkaTarget implements RelayTarget<KafkaRoute> {
  readonly name: string;
  readonly #options: KafkaTargetOptions;
  readonly #brokers: string[];
  #producer: Promise<Producer> | undefined;

  constructor(options: KafkaTargetOptions, brokers: string[]) {
    this.#options = options;
    this.#brokers = brokers;
    this.name = `kafka ${brokers.join(', ')}`;
  }

  async send(message: OutboundMessage, route: KafkaRoute, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    const topic = topicOf(route, message);
    const producer = await this.#connect();
    let written: Awaited<ReturnType<Producer['send']>>;
    try {
      written = await producer.send({
        topic,
        acks: -1,
        timeout: this.#options.timeoutMs ?? 30_000,
        messages: [recordOf(message)],
      });
    } catch (error) {
      throw kafkaSendError(
        error,
        `sending event ${message.id} to topic "${topic}"`,
        this.#brokers,
        message.body.length,
      );
    }
    if (!Array.isArray(written) || written.some((partition) => partition.errorCode !== 0)) {
      throw new BrokerRejectedError(`Kafka at ${this.#brokers.join(', ')} did not acknowledge event ${message.id}`, {
        retryable: true,
      });
    }
  }

  async close(): Promise<void> {
    const pending = this.#producer;
    this.#producer = undefined;
    if (pending === undefined) return;
    try {
      await (await pending).disconnect();
    } catch {
      // never connected
    }
  }

  #connect(): Promise<Producer> {
    if (this.#producer !== undefined) return this.#producer;
    const producer = kafkaClient(
      this.#brokers,
      this.#options.clientId ?? 'relaybus-relay',
      this.#options.connectTimeoutMs ?? 5_000,
    ).producer({ idempotent: true, maxInFlightRequests: 1 });
    const connecting = producer.connect().then(
      () => producer,
      (error: unknown) => {
        if (this.#producer === connecting) this.#producer = undefined;
        throw kafkaError(error, 'connecting the relay producer', this.#brokers);
      },
    );
    this.#producer = connecting;
    return connecting;
  }
}

/**
 * The topic of `message`, checked. A fixed topic that is not a valid name is a configuration error (retried: every
 * event waits until it is fixed); one a route function computed for this message is the message's own (permanent).
 */
function topicOf(route: KafkaRoute, message: OutboundMessage): string {
  const topic = routeValue(route.topic, message);
  try {
    return checkTopic(topic, 'relayTo(kafkaTarget)', 'route.topic');
  } catch (error) {
    if (typeof route.topic === 'string') throw error;
    throw new BrokerRejectedError(
      `event ${message.id} (${message.type}): its route gave an invalid Kafka topic: ${(error as Error).message}`,
      { cause: error, permanent: true },
    );
  }
}

/**
 * A Kafka target for `relayTo`.
 *
 * ```ts
 * const kafka = kafkaTarget({ brokers: ['localhost:9092'] });
 * bus.on(OrderPlaced, 'relay-to-kafka', relayTo(kafka, { topic: 'orders' }));
 * ```
 */
export function kafkaTarget(options: KafkaTargetOptions): RelayTarget<KafkaRoute> {
  if (typeof options !== 'object' || options === null)
    throw new InvalidOptionsError('kafkaTarget: options are required: { brokers }.');
  const brokers = checkBrokers(options.brokers, 'kafkaTarget');
  checkPositiveIntegers('kafkaTarget', options, ['timeoutMs', 'connectTimeoutMs']);
  return new KafkaTarget(options, brokers);
}
