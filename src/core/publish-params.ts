/**
 * What a publish writes and what it answers: declared in core because the instrumentation hooks (core) wrap a publish
 * and name them, and core imports nothing above it. The store contract (store/contract.ts) re-exports them.
 */

/** A handler an event is published to, with the attempt budget of its deliveries. */
export interface PublishHandler {
  readonly name: string;
  /** Attempts before the delivery is dead-lettered (>= 1). */
  readonly maxAttempts: number;
}

/** One event to publish. */
export interface PublishParams {
  /** Caller-supplied id (inbox dedup: publishing it again adds only handlers it never had). Generated when absent. */
  readonly id?: string;
  readonly type: string;
  /** Ordering key: deliveries of one key run one at a time per handler, in commit order. */
  readonly key?: string | null;
  /** Any JSON value. */
  readonly payload: unknown;
  readonly headers?: Readonly<Record<string, string>>;
  /**
   * The handlers this process registers for the type, each with its attempt budget (may be empty). The store adds a
   * delivery for every active subscription of the type these do not name (`subscribe`); where both name a handler,
   * this list wins. An event with no handler either way is refused (`InvalidInputError`), writing nothing.
   */
  readonly handlers: readonly PublishHandler[];
  /** Delayed delivery: not claimable before this instant. Default: `now`. */
  readonly availableAt?: Date;
}

export interface PublishResult {
  readonly eventId: string;
  /** Handlers that got a new delivery in this call (all of them for a new event). */
  readonly addedHandlers: readonly string[];
  /** True when the event id existed before this call. */
  readonly duplicate: boolean;
}
