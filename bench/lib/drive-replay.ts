/**
 * Drive a running replay to its end for the backfill benchmark: relaybus's `runReplay` with its defaults when the
 * build exports it, else a loop over `store.replayStep` with the same defaults (steps of 500 events, at most 2,000 of
 * the replay's deliveries outstanding, 200 ms between polls), so the script runs against a store branch alone.
 */
import type * as Api from '../../src/index.js';
import { sleep } from './stats.js';

type ReplayStore = Pick<Api.Store<unknown>, 'replayStep'>;
type RunReplay = (store: ReplayStore, replayId: string) => Promise<Api.ReplayView>;

export interface DrivenReplay {
  readonly view: Api.ReplayView;
  /** Which driver ran it. */
  readonly driver: 'runReplay' | 'replayStep loop';
  /** Steps that answered `waiting` (in-flight or draining), loop driver only. */
  readonly waits: number;
}

const BATCH = 500;
const MAX_OUTSTANDING = 2_000;
const POLL_MS = 200;

export async function driveReplay(api: typeof Api, store: ReplayStore, replayId: string): Promise<DrivenReplay> {
  const runReplay = (api as unknown as { runReplay?: RunReplay }).runReplay;
  if (typeof runReplay === 'function') return { view: await runReplay(store, replayId), driver: 'runReplay', waits: 0 };
  let outstanding = 0;
  let waits = 0;
  for (;;) {
    const limit = Math.max(0, Math.min(BATCH, MAX_OUTSTANDING - outstanding));
    const step = await store.replayStep({ replayId, limit });
    outstanding = step.outstanding;
    if (step.replay.state !== 'running') return { view: step.replay, driver: 'replayStep loop', waits };
    if (step.waiting !== undefined) waits += 1;
    if (step.waiting !== undefined || step.created === 0 || outstanding >= MAX_OUTSTANDING) await sleep(POLL_MS);
  }
}
