/**
 * A failure no retry can fix. A handler that throws a `PermanentFailure` (or any error `isPermanentFailure` accepts)
 * has its delivery buried at once: dead after this attempt, whatever `maxAttempts` says, with the error as its last
 * error and the attempt charged, and its key free for the next delivery (a dead delivery holds no key). The relay's
 * targets mark the broker errors that repeat on every retry this way (a message over the broker's size limit, one
 * the client cannot encode), so those end dead instead of holding their key behind days of backoff.
 *
 * A brand, not only `instanceof`: an error made by another copy of relaybus (two installs in one process) is
 * recognised too.
 */

const BRAND = Symbol.for('relaybus.permanentFailure');

/** Mark `error` as permanent (non-enumerable: it does not show in logs or JSON). Returns `error`. */
export function markPermanent<E extends object>(error: E): E {
  Object.defineProperty(error, BRAND, { value: true, enumerable: false, configurable: true });
  return error;
}

/** True for a `PermanentFailure` and for the broker errors that a retry cannot fix: their delivery is buried at once. */
export function isPermanentFailure(error: unknown): boolean {
  return (
    (typeof error === 'object' || typeof error === 'function') &&
    error !== null &&
    (error as { [BRAND]?: unknown })[BRAND] === true
  );
}

/**
 * Throw from a handler to say "this delivery cannot succeed, however often it runs": it is dead at once (no further
 * attempts), `message` is its last error, and `relaybus dead requeue` brings it back once the cause is fixed.
 *
 * ```ts
 * bus.on(OrderPlaced, 'charge-card', async (order) => {
 *   const customer = await customers.find(order.customerId);
 *   if (customer === undefined) throw new PermanentFailure(`customer ${order.customerId} does not exist`);
 *   await payments.charge(customer, order);
 * });
 * ```
 */
export class PermanentFailure extends Error {
  constructor(message: string, options?: { readonly cause?: unknown }) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'PermanentFailure';
    markPermanent(this);
  }
}

/** The log line of a delivery that is dead: at once (a permanent failure, a check before its handler ran), or out of attempts. */
export function deadLogLine(permanent: boolean): string {
  return permanent
    ? 'handler failed permanently (a retry cannot fix it); the delivery is dead until requeued'
    : 'handler failed on its last attempt; the delivery is dead until requeued';
}
