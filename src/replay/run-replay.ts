import { setTimeout as sleep } from 'node:timers/promises';
import { InvalidOptionsError, isRetryableError } from '../core/errors.js';
import { describeError, noopLogger, type Logger } from '../core/logger.js';
import { assertLogger } from '../core/options.js';
import type { LiveWait, ReplayStepResult, ReplayView, Store } from '../store/contract.js';
import { MAX_REPLAY_STEP } from '../store/validate-replay.js';
import { ReplayPace, type ReplayPaceView } from './replay-pace.js';
import { ReportedLag } from './reported-lag.js';

/**
 * `runReplay` drives a running replay to its end through `store.replayStep`: bounded steps, throttled so the replay's
 * unfinished deliveries stay below a cap, yielding to live traffic (slower while other handlers' live deliveries wait,
 * `ReplayPace`) and optionally to a rate of events per second, waiting while a step says the replay waits. Every step
 * commits its progress, so stopping (the signal, a crash) loses nothing: driving the same replay again goes on where
 * it stood.
 */

/** Events per step by default. */
export const DEFAULT_REPLAY_BATCH_SIZE = 500;
/** Unfinished replayed deliveries allowed at once by default. */
export const DEFAULT_REPLAY_MAX_OUTSTANDING = 2_000;
/** Wait between steps that create nothing by default, in ms. */
export const DEFAULT_REPLAY_POLL_MS = 50;
/** Consecutive retryable store failures tolerated by default before the error is thrown. */
export const DEFAULT_REPLAY_MAX_RETRIES = 10;
/** The yield's target at most, in ms (an hour). */
export const MAX_REPLAY_LIVE_WAIT_MS = 3_600_000;
/** The yield's target by default: live deliveries of other handlers due this long (ms) without starting slow it down. */
export const DEFAULT_REPLAY_LIVE_WAIT_MS = 20;

const MAX_OUTSTANDING_LIMIT = 10_000_000;
const MAX_POLL_MS = 60_000;
const MAX_RETRY_DELAY_MS = 10_000;
/** While the replay yields, at most one log line this often (ms). */
const YIELD_LOG_MS = 10_000;

/** Options of `runReplay`. */
export interface RunReplayOptions {
  /** Events taken per step, 1..10,000. Default 500. */
  readonly batchSize?: number;
  /**
   * The replay's deliveries not finished yet (pending or running) are kept at most this many: a step takes
   * `min(batchSize, maxOutstanding - outstanding)` events. 1..10,000,000. Default 2,000.
   */
  readonly maxOutstanding?: number;
  /** At most this many events per second (a positive number), in steps of at least 20 events. Default: no rate limit. */
  readonly rate?: number;
  /**
   * Yield to live traffic: while a live delivery of another handler (not paused) has been due longer than this many
   * ms without starting, the replay's rate halves, down to 20 events a second (one step); while none has, it doubles
   * every two seconds (every ten below twice the rate it last overshot at), up to `rate`, from 250 a second. What it
   * looks at: the deliveries not claimed yet (each step's `liveWaits`) and, where the store carries them
   * (`Store.subscribeLiveLag`: the Postgres store with `notify`, the memory store), the workers' reports of how long
   * the deliveries they started had waited (one more connection of the pool while the replay runs; none on a pool of
   * one). 1..3,600,000, or `false` to never yield. Default 20.
   */
  readonly liveWaitMs?: number | false;
  /** How long to wait, in ms, when a step says the replay waits or the outstanding cap is reached. 1..60,000. Default 50. */
  readonly pollMs?: number;
  /** Called after each step with where the replay stands, what the step did, and the pace now. */
  readonly onProgress?: (replay: ReplayView, step: ReplayStepResult, pace: ReplayPaceView) => void;
  /** Stops driving after the current step; the replay stays `running` and can be driven again. */
  readonly signal?: AbortSignal;
  /** Where retried store failures (at warn) and the yield's decisions (at info) are logged. */
  readonly logger?: Logger;
  /** Consecutive retryable store failures retried (with backoff) before the error is thrown, 0..1,000. Default 10. */
  readonly maxRetries?: number;
}

interface Resolved {
  readonly batchSize: number;
  readonly maxOutstanding: number;
  readonly rate: number | undefined;
  readonly liveWaitMs: number | undefined;
  readonly pollMs: number;
  readonly maxRetries: number;
  readonly logger: Logger;
}

function integerOption(options: RunReplayOptions, name: keyof RunReplayOptions, min: number, max: number): void {
  const value = options[name];
  if (value !== undefined && (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max))
    throw new InvalidOptionsError(
      `runReplay(): ${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(value)}.`,
    );
}

function resolve(options: RunReplayOptions): Resolved {
  if (typeof options !== 'object' || options === null)
    throw new InvalidOptionsError(
      'runReplay() takes an options object, e.g. { batchSize: 500, maxOutstanding: 2000 }.',
    );
  integerOption(options, 'batchSize', 1, MAX_REPLAY_STEP);
  integerOption(options, 'maxOutstanding', 1, MAX_OUTSTANDING_LIMIT);
  integerOption(options, 'pollMs', 1, MAX_POLL_MS);
  integerOption(options, 'maxRetries', 0, 1_000);
  const { rate, onProgress, signal, logger, liveWaitMs } = options;
  if (liveWaitMs !== false) integerOption(options, 'liveWaitMs', 1, MAX_REPLAY_LIVE_WAIT_MS);
  if (rate !== undefined && (typeof rate !== 'number' || !Number.isFinite(rate) || rate <= 0))
    throw new InvalidOptionsError(`runReplay(): rate must be a positive number of events per second, got ${rate}.`);
  if (onProgress !== undefined && typeof onProgress !== 'function')
    throw new InvalidOptionsError('runReplay(): onProgress must be a function (replay, step) => void.');
  if (signal !== undefined && !(signal instanceof AbortSignal))
    throw new InvalidOptionsError('runReplay(): signal must be an AbortSignal.');
  if (logger !== undefined) assertLogger(logger, 'runReplay(): logger');
  return {
    batchSize: options.batchSize ?? DEFAULT_REPLAY_BATCH_SIZE,
    maxOutstanding: options.maxOutstanding ?? DEFAULT_REPLAY_MAX_OUTSTANDING,
    rate,
    liveWaitMs: liveWaitMs === false ? undefined : (liveWaitMs ?? DEFAULT_REPLAY_LIVE_WAIT_MS),
    pollMs: options.pollMs ?? DEFAULT_REPLAY_POLL_MS,
    maxRetries: options.maxRetries ?? DEFAULT_REPLAY_MAX_RETRIES,
    logger: logger ?? noopLogger,
  };
}

/** Wait `ms`, or less when `signal` aborts. */
async function pause(ms: number, signal: AbortSignal | undefined): Promise<void> {
  if (ms <= 0) return;
  await sleep(ms, undefined, signal === undefined ? undefined : { signal }).catch(() => {});
}

/**
 * What each step of `runReplay` tells: the pace's look at the live waits it reports, the log lines that say what the
 * yield decided (the handlers it leaves out, once; the one it slows down for, at most every `YIELD_LOG_MS`), and the
 * caller's `onProgress`.
 */
class StepReporter {
  readonly #replayId: string;
  readonly #pace: ReplayPace;
  readonly #settings: Resolved;
  readonly #onProgress: RunReplayOptions['onProgress'];
  /** The workers' reports of their live deliveries' start lag, heard between steps. */
  readonly #reported = new ReportedLag();
  /** The first step was looked at: the handlers left out of the yield are logged once. */
  #looked = false;
  #lastYieldLogAt = Number.NEGATIVE_INFINITY;

  constructor(replayId: string, pace: ReplayPace, settings: Resolved, onProgress: RunReplayOptions['onProgress']) {
    this.#replayId = replayId;
    this.#pace = pace;
    this.#settings = settings;
    this.#onProgress = onProgress;
  }

  /** A worker's report (`Store.subscribeLiveLag`). */
  heard(waits: readonly LiveWait[]): void {
    this.#reported.heard(waits);
  }

  report(last: ReplayStepResult): void {
    const { logger, liveWaitMs } = this.#settings;
    const waits = this.#reported.withStep(last.liveWaits, last.replay.handlers);
    const slowedFor = this.#pace.observe(waits, performance.now());
    const view = this.#pace.view;
    if (!this.#looked && view.leftOut.length > 0)
      logger.info('live deliveries of these handlers already wait; the replay does not slow down for them', {
        replayId: this.#replayId,
        handlers: view.leftOut.join(', '),
        liveWaitMs,
      });
    this.#looked = true;
    if (slowedFor !== undefined && performance.now() - this.#lastYieldLogAt >= YIELD_LOG_MS) {
      this.#lastYieldLogAt = performance.now();
      logger.info('live deliveries are waiting; the replay slows down for them', {
        replayId: this.#replayId,
        handler: slowedFor.handler,
        waitedMs: Math.round(slowedFor.ms),
        liveWaitMs,
        eventsPerSecond: view.eventsPerSecond,
      });
    }
    this.#onProgress?.(last.replay, last, view);
  }
}

/**
 * Drive the running replay `replayId` (from `store.startReplay`) until it is finished or cancelled, or `signal` aborts;
 * resolves with the replay as it stands then. Throws `InvalidOptionsError` for bad options, and the store's errors
 * (a retryable one after `maxRetries` retries).
 *
 * ```ts
 * const replay = await store.startReplay({ mode: 'backfill', handlers: ['update-search'], requestedBy: 'ops' });
 * const done = await runReplay(store, replay.id, { maxOutstanding: 1_000, onProgress: (r) => console.log(r.created, r.total) });
 * ```
 */
export async function runReplay(
  store: Pick<Store<unknown>, 'replayStep' | 'subscribeLiveLag'>,
  replayId: string,
  options: RunReplayOptions = {},
): Promise<ReplayView> {
  const settings = resolve(options);
  const { signal, onProgress } = options;
  // A function, so each read sees the signal as it is now (not as the compiler narrowed it).
  const stopped = (): boolean => signal?.aborted === true;
  let failures = 0;
  const step = async (limit: number): Promise<ReplayStepResult> => {
    for (;;) {
      try {
        const result = await store.replayStep({ replayId, limit });
        failures = 0;
        return result;
      } catch (error) {
        if (!isRetryableError(error) || failures >= settings.maxRetries || stopped()) throw error;
        failures += 1;
        const delay = Math.min(MAX_RETRY_DELAY_MS, settings.pollMs * 2 ** failures);
        settings.logger.warn('a replay step failed; retrying', {
          replayId,
          attempt: failures,
          retryInMs: delay,
          error: describeError(error),
        });
        await pause(delay, signal);
      }
    }
  };

  const pace = new ReplayPace(settings.batchSize, settings.rate, settings.liveWaitMs);
  const reporter = new StepReporter(replayId, pace, settings, onProgress);
  const unlisten = settings.liveWaitMs === undefined ? undefined : await hearWorkers(store, reporter, settings.logger);
  try {
    // A step of 0 first: where the replay stands (and how many of its deliveries are outstanding) before taking any.
    let last = await step(0);
    reporter.report(last);
    while (last.replay.state === 'running' && !stopped()) {
      const room = Math.max(0, settings.maxOutstanding - last.outstanding);
      let limit = last.waiting === undefined ? Math.min(settings.batchSize, pace.perStep, room) : 0;
      if (limit === 0) {
        await pause(settings.pollMs, signal);
        if (stopped()) break;
        // Waiting or at the cap: a step sized by what is free now (the store says again whether it still waits).
        limit = Math.min(settings.batchSize, pace.perStep, room);
      }
      pace.started(limit, performance.now());
      last = await step(limit);
      reporter.report(last);
      if (last.replay.state === 'running') await pause(pace.waitAfter(performance.now()), signal);
    }
    return last.replay;
  } finally {
    await unlisten?.().catch(() => {});
  }
}

/**
 * Listen for the workers' live lag reports while the replay yields; undefined when the store has none to give, or the
 * listener failed (logged: the yield then sees only what its steps report).
 */
async function hearWorkers(
  store: Pick<Store<unknown>, 'subscribeLiveLag'>,
  reporter: StepReporter,
  logger: Logger,
): Promise<(() => Promise<void>) | undefined> {
  if (store.subscribeLiveLag === undefined) return undefined;
  try {
    return await store.subscribeLiveLag((waits) => reporter.heard(waits));
  } catch (error) {
    logger.warn("listening for the workers' live lag reports failed; the replay yields to what its steps see only", {
      error: describeError(error),
    });
    return undefined;
  }
}
