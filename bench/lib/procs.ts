/** Forking and talking to child processes (bench/child.ts run through tsx). */
import { fork, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { DispatcherResult, InitMessage, PublisherResult, PublishPlan } from '../child.js';

const CHILD = fileURLToPath(new URL('../child.ts', import.meta.url));
const HEAP_SAMPLE = fileURLToPath(new URL('./heap-sample.cjs', import.meta.url));

export class Child<_R> {
  readonly process: ChildProcess;
  readonly #messages: { type: string }[] = [];
  readonly #waiters: { type: string; resolve: (m: never) => void; reject: (e: Error) => void }[] = [];
  #exited: Error | undefined;
  handled = 0;

  constructor(init: InitMessage, env: Record<string, string> = {}) {
    this.process = fork(CHILD, [], {
      // BENCH_CPU_PROF=<dir>: V8 CPU profiles of dispatcher processes (for finding where a dispatcher's time goes).
      execArgv: [
        '--import',
        'tsx',
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
      serialization: 'advanced',
      env: { ...process.env, ...env },
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    this.process.on('message', (message: { type: string; handled?: number }) => {
      if (message.type === 'progress') {
        this.handled = message.handled ?? 0;
        return;
      }
      const index = this.#waiters.findIndex((w) => w.type === message.type);
      if (index >= 0) this.#waiters.splice(index, 1)[0]!.resolve(message as never);
      else this.#messages.push(message);
    });
    this.process.on('exit', (code) => {
      this.#exited = new Error(`child ${init.role} ${init.contender} exited with code ${code}`);
      for (const waiter of this.#waiters.splice(0)) waiter.reject(this.#exited);
    });
    this.process.send(init);
  }

  next<T>(type: string): Promise<T> {
    const index = this.#messages.findIndex((m) => m.type === type);
    if (index >= 0) return Promise.resolve(this.#messages.splice(index, 1)[0] as T);
    if (this.#exited) return Promise.reject(this.#exited);
    return new Promise<T>((resolve, reject) =>
      this.#waiters.push({ type, resolve: resolve as (m: never) => void, reject }),
    );
  }

  send(message: unknown): void {
    this.process.send(message as never);
  }

  /** Wait for the child to exit (so its backend sessions have ended and flushed their statistics). */
  exited(): Promise<void> {
    if (this.process.exitCode !== null || this.process.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => this.process.once('exit', () => resolve()));
  }

  kill(): void {
    if (this.process.exitCode === null && this.process.signalCode === null) this.process.kill('SIGKILL');
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
