/**
 * Drive a running replay to its end for the backfill benchmark: relaybus's `runReplay` (from dist/) with the throttle
 * given (its defaults otherwise), counting its steps and those that waited (in-flight deliveries at the start, or
 * draining at the end).
 */
import type * as Api from '../../src/index.js';
import { appendFileSync } from 'node:fs';

export interface DrivenReplay {
  readonly view: Api.ReplayView;
  readonly steps: number;
  /** Steps that answered `waiting` (`in-flight` or `draining`). */
  readonly waits: number;
}

export async function driveReplay(
  api: typeof Api,
  store: Pick<Api.Store<unknown>, 'replayStep'>,
  replayId: string,
  throttle: Pick<Api.RunReplayOptions, 'rate' | 'maxOutstanding'>,
  signal?: AbortSignal,
): Promise<DrivenReplay> {
  let steps = 0;
  let waits = 0;
  const view = await api.runReplay(store, replayId, {
    ...throttle,
    ...(signal ? { signal } : {}),
    onProgress: (_replay, step, pace) => {
      if (process.env.BENCH_PACE_LOG)
        appendFileSync(
          process.env.BENCH_PACE_LOG,
          `${Date.now()} ${step.created} ${step.outstanding} ${step.liveWaits[0]?.ms.toFixed(1) ?? '-'} ${pace.eventsPerSecond} ${pace.yielding}\n`,
        );
      steps += 1;
      if (step.waiting !== undefined) waits += 1;
    },
  });
  return { view, steps, waits };
}
