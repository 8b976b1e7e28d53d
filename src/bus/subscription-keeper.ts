import type { Store, Subscription } from '../store/contract.js';
import type { Clock } from '../core/clock.js';
import type { ResolvedHandler } from '../core/handlers.js';
import { describeError, type Logger } from '../core/logger.js';

/** How often a running bus says again that it runs its handlers (`seen_at`); `relaybus stats` calls older ones stale. */
export const SUBSCRIPTION_REFRESH_MS = 60_000;

/**
 * Where a bus lists its registered handlers with their resolved options, for `relaybus setup --subscriptions`.
 * `Symbol.for`, so a bus built by another copy of relaybus than the CLI's answers too.
 */
export const RESOLVED_HANDLERS: unique symbol = Symbol.for('relaybus.resolvedHandlers');

/** The subscriptions of the handlers a run runs: each handler's type, attempt budget and backoff. */
export function subscriptionsOf<TTx>(handlers: Iterable<ResolvedHandler<TTx>>): Subscription[] {
  return [...handlers].map((handler) => ({
    eventType: handler.eventType,
    handler: handler.name,
    maxAttempts: handler.maxAttempts,
    retry: { backoff: { ...handler.backoff } },
  }));
}

/**
 * Keeps a running bus's subscriptions in the store: records them at start (so publishers in any process fan out to
 * them), then refreshes them every `SUBSCRIPTION_REFRESH_MS`. A failed refresh is logged and tried again next time:
 * the subscriptions stay in place, only their `seen_at` ages.
 */
export class SubscriptionKeeper<TTx> {
  readonly #store: Store<TTx>;
  readonly #subscriptions: readonly Subscription[];
  readonly #clock: Clock | undefined;
  readonly #logger: Logger;
  #timer: ReturnType<typeof setInterval> | undefined;

  constructor(store: Store<TTx>, handlers: Iterable<ResolvedHandler<TTx>>, clock: Clock | undefined, logger: Logger) {
    this.#store = store;
    this.#subscriptions = subscriptionsOf(handlers);
    this.#clock = clock;
    this.#logger = logger;
  }

  /** Record the subscriptions (rejects with the store's error), then refresh them in the background. */
  async start(): Promise<void> {
    await this.#store.subscribe(this.#subscriptions, this.#options());
    this.#timer = setInterval(() => void this.#refresh(), SUBSCRIPTION_REFRESH_MS);
    this.#timer.unref?.();
  }

  /** The store call's options: the bus's clock, when it has one. */
  #options(): { now?: Date } {
    const now = this.#clock?.now();
    return now === undefined ? {} : { now };
  }

  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
  }

  async #refresh(): Promise<void> {
    try {
      await this.#store.subscribe(this.#subscriptions, this.#options());
    } catch (error) {
      this.#logger.warn("could not refresh the subscriptions of this worker's handlers; trying again in a minute", {
        error: describeError(error),
        handlers: this.#subscriptions.length,
      });
    }
  }
}
