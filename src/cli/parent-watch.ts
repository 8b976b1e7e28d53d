/**
 * `npx relaybus worker` as a container's command: the runtime signals `npx` (npm), which hands the
 * signal to the shell it ran the bin through and exits; the worker is orphaned and never hears the
 * signal, and its lanes wait out their lease. An orphan is re-parented (to PID 1 or a subreaper),
 * so its `process.ppid` changes: the worker polls it and stops gracefully when it does. Only a
 * worker npm started (or one asked to) watches its parent: see parent-policy.ts.
 */

import type { Logger } from '../core/logger.js';
import type { ParentWatchDecision } from './parent-policy.js';

/** How often the worker looks at its parent process id. */
export const PARENT_CHECK_MS = 500;

/** Settings of `watchParent`. */
export interface ParentWatchOptions {
  readonly intervalMs?: number;
  /** The current parent process id (tests). */
  readonly ppid?: () => number;
  /** The parent id to compare with, read earlier (at start-up, so a parent lost while the config loads counts too). */
  readonly initial?: number;
}

/**
 * Call `onGone(was, now)` once when the parent process id changes. The timer is unref'd, so it
 * never keeps the process alive. Returns a function that stops watching.
 *
 * ```ts
 * const stopWatching = watchParent((was) => stopGracefully(`the parent process ${was} exited`));
 * ```
 */
export function watchParent(onGone: (was: number, now: number) => void, options: ParentWatchOptions = {}): () => void {
  const ppid = options.ppid ?? (() => process.ppid);
  const was = options.initial ?? ppid();
  const timer = setInterval(() => {
    const now = ppid();
    if (now === was) return;
    clearInterval(timer);
    onGone(was, now);
  }, options.intervalMs ?? PARENT_CHECK_MS);
  timer.unref();
  return () => clearInterval(timer);
}

/**
 * Log what `decision` says and watch the parent only when it says so: `onGone(was, now)` as in `watchParent`, with
 * the parent read at start-up (`initial`). Returns the function that stops watching.
 */
export function watchParentIfDecided(
  decision: ParentWatchDecision,
  log: Pick<Logger, 'info' | 'debug'>,
  initial: number,
  onGone: (was: number, now: number) => void,
): () => void {
  if (!decision.watch) {
    log.debug(`keeps running if its parent process exits: ${decision.why}`);
    return () => {};
  }
  log.info(`stops when its parent process exits: ${decision.why}`);
  return watchParent(onGone, { initial });
}
