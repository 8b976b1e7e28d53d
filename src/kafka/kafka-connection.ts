import { Kafka, logLevel, type KafkaConfig } from 'kafkajs';
import { InvalidOptionsError } from '../core/errors.js';
import {
  BrokerNotFoundError,
  BrokerRejectedError,
  BrokerUnavailableError,
  MessageTooLargeError,
} from '../broker/broker-errors.js';

/**
 * Kafka clients (kafkajs) and typed errors. kafkajs retries a lost broker by itself (connections, metadata, a
 * consumer that crashed on a retriable error restarts); only the first connect of a relaybus call fails with
 * `BrokerUnavailableError` naming the brokers.
 */

/** The broker list, checked: `host:9092` entries (no scheme: kafkajs takes host:port). */
export function checkBrokers(brokers: unknown, where: string): string[] {
  const list = typeof brokers === 'string' ? brokers.split(',') : Array.isArray(brokers) ? brokers : undefined;
  if (list === undefined || list.length === 0 || list.some((b) => typeof b !== 'string' || b.trim() === '')) {
    throw new InvalidOptionsError(`${where}: \`brokers\` is required: host:port of a Kafka broker (or a list).`);
  }
  const trimmed = (list as string[]).map((b) => b.trim());
  for (const broker of trimmed) {
    if (!/^[^\s:/]+:\d{1,5}$/.test(broker)) {
      throw new InvalidOptionsError(`${where}: a Kafka broker is host:port (e.g. localhost:9092), got "${broker}".`);
    }
  }
  return trimmed;
}

/** A topic name as Kafka accepts it: 1..249 of [a-zA-Z0-9._-], not "." or "..". */
export function checkTopic(topic: unknown, where: string, what = 'topic'): string {
  if (typeof topic !== 'string' || !/^[a-zA-Z0-9._-]{1,249}$/.test(topic) || topic === '.' || topic === '..') {
    throw new InvalidOptionsError(
      `${where}: \`${what}\` must be a Kafka topic name (1 to 249 of letters, digits, ".", "_", "-"), got ${JSON.stringify(topic)}.`,
    );
  }
  return topic;
}

/** A kafkajs client that logs nothing of its own (relaybus reports through its logger and lifecycle events). */
export function kafkaClient(brokers: readonly string[], clientId: string, connectTimeoutMs: number): Kafka {
  const config: KafkaConfig = {
    brokers: [...brokers],
    clientId,
    connectionTimeout: connectTimeoutMs,
    logLevel: logLevel.NOTHING,
    retry: { initialRetryTime: 100, maxRetryTime: 10_000, retries: 8 },
  };
  return new Kafka(config);
}

/** The typed error of a failed Kafka call about `what`. */
export function kafkaError(error: unknown, what: string, brokers: readonly string[]): Error {
  const message = error instanceof Error ? error.message : String(error);
  const type = (error as { type?: unknown } | null)?.type;
  if (type === 'UNKNOWN_TOPIC_OR_PARTITION' || /does not host this topic-partition|unknown topic/i.test(message)) {
    return new BrokerNotFoundError(`${what} does not exist on Kafka at ${brokers.join(', ')}: ${message}`, {
      cause: error,
    });
  }
  const refused = /SASL|authenticat|authoriz/i.test(`${String(type)} ${message}`);
  return new BrokerUnavailableError(
    `${what}: Kafka at ${brokers.join(', ')} ${refused ? 'refused the request' : 'cannot be reached'}: ${message}`,
    { cause: error, retryable: !refused },
  );
}

/** Kafka's answers about a record itself: a retry of the same record gets them again. */
const RECORD_REFUSED = new Set(['INVALID_RECORD', 'INVALID_TOPIC_EXCEPTION']);
const RECORD_TOO_LARGE = new Set(['MESSAGE_TOO_LARGE', 'RECORD_LIST_TOO_LARGE']);

/** The record error type (above) of `error` or of an error it wraps (retries exceeded, an aggregate), if any. */
function recordErrorType(error: unknown, depth = 0): string | undefined {
  if (typeof error !== 'object' || error === null || depth > 4) return undefined;
  const { type, cause, errors } = error as { type?: unknown; cause?: unknown; errors?: unknown };
  if (typeof type === 'string' && (RECORD_REFUSED.has(type) || RECORD_TOO_LARGE.has(type))) return type;
  for (const inner of [cause, ...(Array.isArray(errors) ? errors : [])]) {
    const found = recordErrorType(inner, depth + 1);
    if (found !== undefined) return found;
  }
  return undefined;
}

/**
 * The typed error of a failed send of one record of `size` bytes: too large or refused as a record (permanent
 * failures: the relay's delivery is dead at once), else as `kafkaError` (retried).
 */
export function kafkaSendError(error: unknown, what: string, brokers: readonly string[], size: number): Error {
  const type = recordErrorType(error);
  const message = error instanceof Error ? error.message : String(error);
  if (type !== undefined && RECORD_TOO_LARGE.has(type))
    return new MessageTooLargeError(
      `${what}: the record (${size} bytes of payload) is larger than Kafka at ${brokers.join(', ')} accepts (${type}: ${message}); it was not sent`,
      size,
      0,
    );
  if (type !== undefined && RECORD_REFUSED.has(type))
    return new BrokerRejectedError(`${what}: Kafka at ${brokers.join(', ')} refused the record (${type}: ${message})`, {
      cause: error,
      permanent: true,
    });
  return kafkaError(error, what, brokers);
}
