/**
 * A benchmark child process forked with tsx and spoken to over IPC: its messages by type (`next`), its progress (a
 * `progress` message's handled count), its exit. The harness's children (lib/procs.ts) and the backfill's
 * (lib/backfill-proc.ts) are this with their script and flags.
 */
import { type ChildProcess, fork } from 'node:child_process';

export class ForkedChild {
  readonly process: ChildProcess;
  readonly #messages: { type: string }[] = [];
  readonly #waiters: { type: string; resolve: (m: never) => void; reject: (e: Error) => void }[] = [];
  #exited: Error | undefined;
  handled = 0;

  /** Forks `script` with `--import tsx` and `flags`, then sends it `init`; `label` names it when it exits. */
  constructor(script: string, flags: readonly string[], init: object, label: string, env: Record<string, string> = {}) {
    this.process = fork(script, [], {
      execArgv: ['--import', 'tsx', ...flags],
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
      this.#exited = new Error(`${label} exited with code ${code}`);
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
