/** Forking and talking to child processes (bench/child.ts run through tsx). */
import { fileURLToPath } from 'node:url';
import type { DispatcherResult, InitMessage, PublisherResult, PublishPlan } from '../child.js';
import { ForkedChild } from './forked-child.js';

const CHILD = fileURLToPath(new URL('../child.ts', import.meta.url));
const HEAP_SAMPLE = fileURLToPath(new URL('./heap-sample.cjs', import.meta.url));

export class Child<_R> extends ForkedChild {
  constructor(init: InitMessage, env: Record<string, string> = {}) {
    super(
      CHILD,
      [
        // BENCH_CPU_PROF=<dir>: V8 CPU profiles of dispatcher processes (for finding where a dispatcher's time goes).
        ...(process.env.BENCH_CPU_PROF && init.role === 'dispatcher'
          ? ['--cpu-prof', '--cpu-prof-dir', process.env.BENCH_CPU_PROF]
          : []),
        // BENCH_HEAP_SAMPLE=<dir>: where dispatcher processes allocate (bench/lib/heap-sample.cjs).
        ...(process.env.BENCH_HEAP_SAMPLE && init.role === 'dispatcher' ? ['--require', HEAP_SAMPLE] : []),
        // BENCH_DISPATCHER_FLAGS="--trace-gc ...": more Node flags for dispatcher processes (diagnosis only).
        ...(process.env.BENCH_DISPATCHER_FLAGS && init.role === 'dispatcher'
          ? process.env.BENCH_DISPATCHER_FLAGS.split(' ').filter(Boolean)
          : []),
      ],
      init,
      `child ${init.role} ${init.contender}`,
      env,
    );
  }
}

export type PublisherChild = Child<PublisherResult>;
export type DispatcherChild = Child<DispatcherResult>;

export function startPublisher(init: Omit<InitMessage, 'type' | 'role'>): Child<PublisherResult> {
  return new Child<PublisherResult>({ type: 'init', role: 'publisher', ...init });
}

export function startDispatcher(
  init: Omit<InitMessage, 'type' | 'role'>,
  slot: number,
  slots: number,
): Child<DispatcherResult> {
  return new Child<DispatcherResult>(
    { type: 'init', role: 'dispatcher', ...init },
    { BENCH_DISPATCHER_SLOT: String(slot), BENCH_DISPATCHER_SLOTS: String(slots) },
  );
}

/** Publish a plan with fresh publisher processes: start them, wait until all are ready, go, collect. */
export async function publishWith(
  init: Omit<InitMessage, 'type' | 'role'>,
  plans: readonly PublishPlan[],
): Promise<PublisherResult[]> {
  const children = plans.map(() => startPublisher(init));
  try {
    await Promise.all(children.map((c) => c.next('ready')));
    const results = Promise.all(children.map((c) => c.next<PublisherResult>('result')));
    children.forEach((c, index) => c.send({ type: 'go', plan: plans[index] }));
    const out = await results;
    await Promise.all(children.map((c) => c.exited()));
    return out;
  } finally {
    children.forEach((c) => c.kill());
  }
}
