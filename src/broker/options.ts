import { InvalidOptionsError } from '../core/errors.js';
import type { BackoffOptions } from '../core/retry-policy.js';

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
