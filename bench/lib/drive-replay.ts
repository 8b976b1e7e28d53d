/**
 * Drive a running replay to its end for the backfill benchmark: relaybus's `runReplay` (from dist/) with the throttle
 * given (its defaults otherwise), counting its steps, those that waited (in-flight deliveries at the start, or
 * draining at the end) and those after which it yielded to live traffic.
 */
import type * as Api from '../../src/index.js';

export interface DrivenReplay {
  readonly view: Api.ReplayView;
  readonly steps: number;
  /** Steps that answered `waiting` (`in-flight` or `draining`). */
  readonly waits: number;
  /** Steps after which it was yielding to live traffic (another handler's live deliveries waited too long). */
  readonly yielding: number;
}

export async function driveReplay(
  api: typeof Api,
  store: Pick<Api.Store<unknown>, 'replayStep'>,
  replayId: string,
  throttle: Pick<Api.RunReplayOptions, 'rate' | 'maxOutstanding' | 'liveWaitMs'>,
  signal?: AbortSignal,
): Promise<DrivenReplay> {
  let steps = 0;
  let waits = 0;
  let yielding = 0;
  const view = await api.runReplay(store, replayId, {
    ...throttle,
    ...(signal ? { signal } : {}),
    onProgress: (_replay, step, pace) => {
      steps += 1;
      if (step.waiting !== undefined) waits += 1;
      if (pace.yielding) yielding += 1;
    },
  });
  return { view, steps, waits, yielding };
}
