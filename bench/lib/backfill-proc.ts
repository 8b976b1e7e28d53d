/**
 * The backfill benchmark's child processes (lib/backfill-child.ts: a dispatcher or a publisher; see
 * lib/forked-child.ts).
 */
import { fileURLToPath } from 'node:url';
import type { BackfillDispatcherResult, BackfillInit } from './backfill-bus.js';
import { ForkedChild } from './forked-child.js';

const CHILD = fileURLToPath(new URL('./backfill-child.ts', import.meta.url));

export class Proc extends ForkedChild {
  constructor(init: Omit<BackfillInit, 'type'>) {
    // BENCH_CHILD_FLAGS="--trace-gc ...": more Node flags for the dispatcher and the publisher (diagnosis only).
    const flags = (process.env.BENCH_CHILD_FLAGS ?? '').split(' ').filter(Boolean);
    super(CHILD, flags, { type: 'init', ...init }, `backfill ${init.role}`);
  }
}

/** Stop a dispatcher gracefully and collect its records. */
export async function stopDispatcher(dispatcher: Proc): Promise<BackfillDispatcherResult> {
  const result = dispatcher.next<BackfillDispatcherResult>('result');
  dispatcher.send({ type: 'stop' });
  const out = await result;
  await dispatcher.exited();
  return out;
}
