/** The handler hook of a dispatcher process (bench/child.ts): what every contender's handler calls. */
import type { HandlerPlan } from '../child.js';
import { keyNumber } from './keys.js';
import { machineNow, type Recorder } from './recorder.js';
import type { OnHandle } from './types.js';

/** The handler hook of a run: records every successful attempt, fails the planned ones, watches overlaps. */
export function makeHook(
  plan: HandlerPlan,
  recorder: Recorder,
  failures: Recorder,
  state: { overlaps: number },
): OnHandle {
  const failFirst = new Set(plan.failFirst ?? []);
  const failed = new Set<number>();
  // (handler, key) -> deliveries of it running in this process right now.
  const running = new Map<number, number>();
  const keys = plan.keys;
  const ordered = keys.kind !== 'none';
  const enter = (i: number, h: number): number => {
    const key = keyNumber(keys, i);
    if (key < 0) return -1;
    const slot = key * 2 + h;
    const now = running.get(slot) ?? 0;
    if (now > 0) state.overlaps += 1;
    running.set(slot, now + 1);
    return slot;
  };
  const leave = (slot: number): void => {
    if (slot < 0) return;
    const now = running.get(slot)! - 1;
    if (now === 0) running.delete(slot);
    else running.set(slot, now);
  };
  const maybeFail = (i: number, h: number, start: number): void => {
    if (failFirst.size === 0 || !failFirst.has(i)) return;
    const id = i * 2 + h;
    if (failed.has(id)) return;
    failed.add(id);
    failures.add(i, h, start, start);
    throw new Error(`bench: planned failure of the first attempt of event ${i} handler ${h}`);
  };
  if (plan.mode === 'noop') {
    return (i, h) => {
      const start = machineNow();
      maybeFail(i, h, start);
      // A synchronous no-op ends as it starts: it cannot overlap another run in this process (no
      // marker needed); overlaps across processes are caught by validate.ts from start/end times.
      recorder.add(i, h, start, start);
    };
  }
  return async (i, h) => {
    const start = machineNow();
    maybeFail(i, h, start);
    const slot = ordered ? enter(i, h) : -1;
    await new Promise<void>((resolve) => setImmediate(resolve));
    leave(slot);
    recorder.add(i, h, start, machineNow());
  };
}
