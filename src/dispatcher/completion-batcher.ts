import { RelayBusError } from '../core/errors.js';
import { describeError, type Logger } from '../core/logger.js';
import type { DeliveryLease, Store } from '../store/contract.js';

/**
 * Groups completions. Every handler that succeeds asks for its delivery to be completed; those
 * asking within `windowMs` of the first one are written by a single `store.completeMany` (one
 * statement on Postgres). Each caller gets its own fenced answer (`CompletionAnswer`): completed, or
 * the lease was lost (the delivery belongs to another worker now; never retried here).
 *
 * A failed write (the database is unreachable) is retried a few times with short pauses, then
 * rejected; the caller decides what to do (see handler-runner). Input errors are not retried.
 */

/** What the batcher needs: the store's `completeMany`, the window and the time passed to the store. */
export interface CompletionBatcherOptions {
  readonly store: Pick<Store<unknown>, 'completeMany' | 'completeManyReportingNext'>;
  /**
   * A write completed a keyed delivery whose key's next delivery is due now (a store without
   * `completeManyReportingNext` cannot tell: then after every write that completed one).
   */
  readonly onNextDue?: () => void;
  /** 0 writes on the next turn of the event loop. */
  readonly windowMs: number;
  /** Write at once when this many completions are waiting. */
  readonly maxBatchSize?: number;
  /**
   * Completions commit in the order they were asked for: one write at a time, whether its own or riding on a claim
   * (a claim takes none while a write is out, and none is written while a claim carries some), with no second write
   * at `maxBatchSize`. For followers (`ClaimedDelivery.follows`), which start once the completion before them is
   * queued: a later completion of a key committed before an earlier one, a crash in between would run the earlier
   * delivery again after the later one.
   */
  readonly inOrder?: boolean;
  /** Pauses before the retries of a failed write. */
  readonly retryDelaysMs?: readonly number[];
  readonly now: () => Date | undefined;
  readonly logger: Logger;
}

/**
 * How a completion's write went: `completed` (deleted), `lease-lost` (refused: the delivery is another worker's), or
 * `unconfirmed`: refused after an earlier write of it failed (a retried write, a claim that carried it and failed),
 * which may have committed before its answer was lost; the delivery is gone either way, done or run elsewhere, and
 * only a lookup tells which.
 */
export type CompletionAnswer = 'completed' | 'lease-lost' | 'unconfirmed';

/**
 * A completion waiting for its write: told once, `resolve` or `reject` (the write failed for good). A run that
 * finished at once is its own waiter (`enqueue`): no promise per delivery.
 */
export interface CompletionWaiter {
  readonly lease: DeliveryLease;
  resolve(answer: CompletionAnswer): void;
  reject(error: unknown): void;
}

const DEFAULT_MAX_BATCH_SIZE = 1_000;
// Short on purpose (about half a second in all): a completion retried after the database came back from a crash could
// delete a delivery whose handler's own writes the crash lost (when they were committed asynchronously); a longer
// outage leaves the delivery to run again (at-least-once). The chaos suite's crash restart shows it.
const DEFAULT_RETRY_DELAYS_MS: readonly number[] = [25, 100, 400];

/** Completions handed to the next claim (`store.completeAndClaim`) instead of a `completeMany` of their own. */
export interface RidingCompletions {
  readonly leases: readonly DeliveryLease[];
  /** The claim wrote them: one result per lease, in order. */
  settle(results: readonly boolean[]): void;
  /** The claim failed: they go back to the batcher and are written by the next claim or by `completeMany`. */
  giveBack(): void;
}

/** Batches completions of one dispatcher into `completeMany` calls, or hands them to the next claim. */
export class CompletionBatcher {
  readonly #options: CompletionBatcherOptions;
  #waiting: CompletionWaiter[] = [];
  #timer: NodeJS.Timeout | undefined;
  readonly #writes = new Set<Promise<void>>();
  /** Held (`hold`): a window that closes leaves its completions for the next claim instead of writing them. */
  #held = false;
  /** A window closed while held: `unhold` writes what waits. */
  #closedWhileHeld = false;
  /** Completions taken by a claim that has not settled or given them back yet. */
  #riding = false;
  /** Waiters an earlier write of which failed: it may have committed (see `CompletionWaiter.resolve`). */
  readonly #triedBefore = new WeakSet<CompletionWaiter>();

  constructor(options: CompletionBatcherOptions) {
    this.#options = options;
  }

  /** Completions waiting for the window to close. */
  get pending(): number {
    return this.#waiting.length;
  }

  /** Complete one delivery; resolves with how its write went. */
  complete(lease: DeliveryLease): Promise<CompletionAnswer> {
    return new Promise<CompletionAnswer>((resolve, reject) => this.enqueue({ lease, resolve, reject }));
  }

  /** Complete one delivery and tell `waiter` how it went (as `complete`, without a promise). */
  enqueue(waiter: CompletionWaiter): void {
    this.#waiting.push(waiter);
    if (this.#waiting.length >= (this.#options.maxBatchSize ?? DEFAULT_MAX_BATCH_SIZE)) this.#writeNow();
    else if (this.#timer === undefined) this.#openWindow();
  }

  /**
   * Until the next `take` or `unhold`, let windows close without a write: the caller's next claim carries what waits
   * (a claim launching its runs over several turns of the event loop). `maxBatchSize` still writes at once.
   */
  hold(): void {
    this.#held = true;
  }

  /** End a hold: what waits is written now if its window closed meanwhile. */
  unhold(): void {
    this.#held = false;
    if (this.#closedWhileHeld) {
      this.#closedWhileHeld = false;
      this.#writeNow();
    }
  }

  #openWindow(): void {
    this.#timer = setTimeout(() => this.#windowClosed(), this.#options.windowMs);
  }

  #windowClosed(): void {
    this.#timer = undefined;
    if (this.#held) this.#closedWhileHeld = true;
    else this.#writeNow();
  }

  /** Take every waiting completion for the next claim to write (none waiting: undefined). Ends a hold. */
  take(): RidingCompletions | undefined {
    this.#held = false;
    this.#closedWhileHeld = false;
    // In order: not while a write is out (what waits goes out when it ends, or with a later claim).
    if (this.#waiting.length === 0 || (this.#options.inOrder === true && this.#writes.size > 0)) return undefined;
    clearTimeout(this.#timer);
    this.#timer = undefined;
    const batch = this.#waiting;
    this.#waiting = [];
    this.#riding = true;
    return {
      leases: batch.map((item) => item.lease),
      settle: (results) => {
        this.#riding = false;
        this.#resolve(batch, results);
        // In order, a window that closed meanwhile wrote nothing: a new one, so the next claim can carry what waits.
        if (this.#waiting.length > 0 && this.#timer === undefined) this.#openWindow();
      },
      giveBack: () => {
        this.#riding = false;
        // Older than what waits: first. The claim may have committed before it failed.
        for (const item of batch) this.#triedBefore.add(item);
        this.#waiting.unshift(...batch);
        this.#writeNow();
      },
    };
  }

  /** Write what is waiting now and wait for every write in progress (and the writes of what waited for them). */
  async flush(): Promise<void> {
    while (this.#waiting.length > 0 || this.#writes.size > 0) {
      this.#writeNow();
      await Promise.all([...this.#writes]);
    }
  }

  /**
   * One write at a time (a second only once `maxBatchSize` completions wait): what completes while a write runs goes out
   * in one batch when it ends. Unbounded, a slow write (a worker's first statements on cold connections are slow at
   * start-up) let the next windows' writes start beside it, each on another cold connection, each as slow.
   */
  #writeNow(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (this.#waiting.length === 0) return;
    if (this.#options.inOrder === true) {
      if (this.#writes.size > 0 || this.#riding) return;
    } else if (this.#writes.size > 0 && this.#waiting.length < (this.#options.maxBatchSize ?? DEFAULT_MAX_BATCH_SIZE)) {
      return;
    }
    const batch = this.#waiting;
    this.#waiting = [];
    const write = this.#write(batch).finally(() => {
      this.#writes.delete(write);
      // What waited for this write (its window over, or none set: a window still open writes when it closes).
      if (this.#timer === undefined) this.#writeNow();
    });
    this.#writes.add(write);
  }

  /** The store's write, and whether a claim now would find a completed key's next delivery due. */
  async #completeMany(leases: readonly DeliveryLease[]): Promise<{ results: boolean[]; nextDue: boolean }> {
    const { store } = this.#options;
    if (store.completeManyReportingNext === undefined) {
      const results = await store.completeMany(leases, this.#options.now());
      return { results, nextDue: Array.isArray(results) && results.includes(true) };
    }
    const { completed, nextDue } = await store.completeManyReportingNext(leases, this.#options.now());
    return { results: completed, nextDue };
  }

  /**
   * Tell every waiter of a batch: one that throws (a run's end runs the logger and the dispatcher's bookkeeping) is
   * logged, and the others are still told.
   */
  #tell(batch: readonly CompletionWaiter[], tell: (item: CompletionWaiter, index: number) => void): void {
    batch.forEach((item, index) => {
      try {
        tell(item, index);
      } catch (error) {
        this.#options.logger.error('ending a run after its completion failed unexpectedly', {
          deliveryId: item.lease.deliveryId,
          error: describeError(error),
        });
      }
    });
  }

  /** Tell each waiter of a batch its answer: a refused one that an earlier write may have committed is unconfirmed. */
  #resolve(batch: readonly CompletionWaiter[], results: readonly boolean[]): void {
    this.#tell(batch, (item, index) => {
      item.resolve(results[index] === true ? 'completed' : this.#triedBefore.has(item) ? 'unconfirmed' : 'lease-lost');
    });
  }

  async #write(batch: readonly CompletionWaiter[]): Promise<void> {
    const delays = this.#options.retryDelaysMs ?? DEFAULT_RETRY_DELAYS_MS;
    const leases = batch.map((item) => item.lease);
    for (let attempt = 0; ; attempt += 1) {
      try {
        const { results, nextDue } = await this.#completeMany(leases);
        if (!Array.isArray(results) || results.length !== batch.length) {
          throw new Error(
            `store.completeMany returned ${Array.isArray(results) ? results.length : typeof results} results for ${batch.length} leases`,
          );
        }
        this.#resolve(batch, results);
        if (nextDue) this.#options.onNextDue?.();
        return;
      } catch (error) {
        // The store's classification decides (a data or constraint error stays one); an error no store classified (a
        // third-party store's own) gets the bounded retries.
        const retryable = error instanceof RelayBusError ? error.retryable : true;
        const delay = delays[attempt];
        if (!retryable || delay === undefined) {
          this.#options.logger.error('completing a batch of deliveries failed', {
            deliveries: batch.length,
            attempts: attempt + 1,
            error: describeError(error),
          });
          this.#tell(batch, (item) => item.reject(error));
          return;
        }
        this.#options.logger.warn('completing a batch of deliveries failed; retrying', {
          deliveries: batch.length,
          retryInMs: delay,
          error: describeError(error),
        });
        for (const item of batch) this.#triedBefore.add(item);
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }
}
