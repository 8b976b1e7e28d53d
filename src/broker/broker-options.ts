import { InvalidOptionsError } from '../core/errors.js';
import type { EventDefinition } from '../core/events.js';
import type { Logger } from '../core/logger.js';
import type { BackoffOptions } from '../core/retry-policy.js';
import type { InboxBus } from './inbox-engine.js';
import type { InboxMapper } from './broker-message.js';

/** Defaults shared by the broker inboxes. */
export const INBOX_DEFAULTS = Object.freeze({
  /** Unacknowledged messages the broker sends ahead (RabbitMQ prefetch, JetStream max ack pending). */
  prefetch: 200,
  /** Most messages per store transaction. */
  batchSize: 50,
  /** Store transactions at once. */
  concurrency: 4,
  shutdownGraceMs: 10_000,
  connectTimeoutMs: 5_000,
});

/** Reconnect delays after a lost broker connection: 100 ms doubling to 10 s, +-20%. */
export const RECONNECT_BACKOFF: BackoffOptions = Object.freeze({
  initialDelayMs: 100,
  maxDelayMs: 10_000,
  multiplier: 2,
  jitter: 0.2,
});

const LIMITS: Readonly<Record<string, readonly [number, number]>> = {
  prefetch: [1, 65_535],
  maxAckPending: [1, 100_000],
  batchSize: [1, 1_000],
  concurrency: [1, 100],
  shutdownGraceMs: [0, 2_147_483_647],
  connectTimeoutMs: [1, 600_000],
  ackWaitMs: [1_000, 86_400_000],
};

/** Throw `InvalidOptionsError` for a numeric option that is not an integer in its range. */
export function checkInboxNumbers(where: string, values: Readonly<Record<string, number | undefined>>): void {
  for (const [name, value] of Object.entries(values)) {
    if (value === undefined) continue;
    const [min, max] = LIMITS[name] ?? [0, Number.MAX_SAFE_INTEGER];
    if (!Number.isInteger(value) || value < min || value > max) {
      throw new InvalidOptionsError(
        `${where}: \`${name}\` must be an integer from ${min} to ${max}, got ${JSON.stringify(value)}.`,
      );
    }
  }
}

/** Each of `names` in `options` is a positive integer when given (the timeouts and sizes of a relay target). */
export function checkPositiveIntegers<T extends object>(
  where: string,
  options: T,
  names: readonly (keyof T & string)[],
): void {
  for (const name of names) {
    const value: unknown = options[name];
    if (value !== undefined && (!Number.isInteger(value) || (value as number) < 1))
      throw new InvalidOptionsError(`${where}: \`${name}\` must be a positive integer, got ${JSON.stringify(value)}.`);
  }
}

/** The options every inbox has, whatever the broker. */
export interface InboxOptionsBase<TTx> {
  /** The bus whose store receives the events (its handlers run in `relaybus worker`). */
  readonly bus: InboxBus<TTx>;
  /** The events the default mapper knows (the relay's message format). Give `events` or `map`. */
  readonly events?: readonly EventDefinition[];
  /** Turns a message into an event; throw `InboxRejection` to dead-letter it. Default `defaultMapper(events)`. */
  readonly map?: InboxMapper;
  /** Most messages per transaction. Default 50. */
  readonly batchSize?: number;
  /** Transactions at once. Default 4. */
  readonly concurrency?: number;
  /** How long `stop()` lets held messages finish. Default 10 s. */
  readonly shutdownGraceMs?: number;
  /** Connection timeout. Default 5 s. */
  readonly connectTimeoutMs?: number;
  /** Run `bus.store.setup()` in `start()`. Default true. */
  readonly setupStore?: boolean;
  readonly logger?: Logger;
}

/** Throw `InvalidOptionsError` unless `options` has a bus, events or a mapper, and numbers in range. */
export function checkInboxBase<TTx>(where: string, options: InboxOptionsBase<TTx>, carries: string): void {
  if (typeof options.bus !== 'object' || options.bus === null || typeof options.bus.publishMany !== 'function')
    throw new InvalidOptionsError(`${where}: \`bus\` is required: the relaybus bus whose store receives the events.`);
  if (options.map === undefined && (options.events === undefined || options.events.length === 0))
    throw new InvalidOptionsError(
      `${where}: give \`events\` (the event definitions the ${carries} carries) or a \`map\` function.`,
    );
  checkInboxNumbers(where, {
    batchSize: options.batchSize,
    concurrency: options.concurrency,
    shutdownGraceMs: options.shutdownGraceMs,
    connectTimeoutMs: options.connectTimeoutMs,
  });
}
