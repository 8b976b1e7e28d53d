/**
 * The benchmark's child processes (lib/backfill-child.ts: a dispatcher or a publisher), forked with tsx and spoken to
 * over IPC: their messages by type, their progress, their exit.
 */
import { fork } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import type { BackfillDispatcherResult, BackfillInit } from './backfill-bus.js';

const CHILD = fileURLToPath(new URL('./backfill-child.ts', import.meta.url));

export class Proc {
  readonly #child = fork(CHILD, [], {
    execArgv: ['--import', 'tsx', ...(process.env.BENCH_CHILD_FLAGS ?? '').split(' ').filter(Boolean)],
    serialization: 'advanced',
    stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
  });
  readonly #messages: { type: string }[] = [];
  readonly #waiters: { type: string; resolve: (m: never) => void; reject: (e: Error) => void }[] = [];
  #exited: Error | undefined;
  handled = 0;

  constructor(init: Omit<BackfillInit, 'type'>) {
    this.#child.on('message', (message: { type: string; handled?: number }) => {
      if (message.type === 'progress') {
        this.handled = message.handled ?? 0;
        return;
      }
      const index = this.#waiters.findIndex((w) => w.type === message.type);
      if (index >= 0) this.#waiters.splice(index, 1)[0]!.resolve(message as never);
      else this.#messages.push(message);
    });
    this.#child.on('exit', (code) => {
      this.#exited = new Error(`backfill ${init.role} exited with code ${code}`);
      for (const waiter of this.#waiters.splice(0)) waiter.reject(this.#exited);
    });
    this.#child.send({ type: 'init', ...init });
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
    this.#child.send(message as never);
  }

  exited(): Promise<void> {
    if (this.#child.exitCode !== null || this.#child.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => this.#child.once('exit', () => resolve()));
  }

  kill(): void {
    if (this.#child.exitCode === null && this.#child.signalCode === null) this.#child.kill('SIGKILL');
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
