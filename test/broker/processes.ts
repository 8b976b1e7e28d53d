/**
 * The real CLI (`node --import tsx src/cli/main.ts <command>`) as child processes of the broker
 * crash tests: output captured, waits bounded, SIGKILL on demand, none left behind.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { after, before } from 'node:test';
import { fileURLToPath } from 'node:url';
import { AMQP_URL, openSchema, RabbitAdmin, type TestSchema } from './support.js';

const REPO = fileURLToPath(new URL('../../', import.meta.url));
const MAIN = fileURLToPath(new URL('../../src/cli/main.ts', import.meta.url));
const live = new Set<CliProcess>();
process.once('exit', () => {
  for (const child of live) child.child.kill('SIGKILL');
});

export class CliProcess {
  readonly child: ChildProcess;
  readonly label: string;
  stdout = '';
  stderr = '';
  exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;

  constructor(label: string, args: readonly string[], env: Record<string, string>) {
    this.label = label;
    const childEnv: NodeJS.ProcessEnv = { ...process.env, ...env };
    delete childEnv.NODE_TEST_CONTEXT;
    this.child = spawn(process.execPath, ['--enable-source-maps', '--import', 'tsx', MAIN, ...args], {
      cwd: REPO,
      env: childEnv,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    live.add(this);
    this.child
      .stdout!.setEncoding('utf8')
      .on('data', (chunk: string) => (this.stdout = (this.stdout + chunk).slice(-200_000)));
    this.child
      .stderr!.setEncoding('utf8')
      .on('data', (chunk: string) => (this.stderr = (this.stderr + chunk).slice(-50_000)));
    this.exited = new Promise((resolve) => {
      this.child.once('exit', (code, signal) => {
        this.exit = { code, signal };
        live.delete(this);
        resolve(this.exit);
      });
    });
  }

  get alive(): boolean {
    return this.exit === undefined;
  }

  /** Resolve when stdout has a line matching `pattern`; reject on exit or after `timeoutMs`. */
  async waitFor(pattern: RegExp, what: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!pattern.test(this.stdout)) {
      if (!this.alive)
        throw new Error(
          `${this.label} exited (${JSON.stringify(this.exit)}) before ${what}.\nstdout:\n${this.stdout.slice(-3_000)}\nstderr:\n${this.stderr.slice(-3_000)}`,
        );
      if (Date.now() > deadline)
        throw new Error(
          `timed out after ${timeoutMs} ms waiting for ${this.label}: ${what}.\nstdout:\n${this.stdout.slice(-3_000)}\nstderr:\n${this.stderr.slice(-3_000)}`,
        );
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }

  signal(signal: NodeJS.Signals): void {
    if (this.alive) this.child.kill(signal);
  }

  async waitForExit(timeoutMs: number): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([
        this.exited,
        new Promise<never>((_, reject) => {
          timer = setTimeout(
            () =>
              reject(
                new Error(
                  `${this.label} did not exit within ${timeoutMs} ms.\nstdout:\n${this.stdout.slice(-3_000)}\nstderr:\n${this.stderr.slice(-3_000)}`,
                ),
              ),
            timeoutMs,
          );
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  }

  async kill(): Promise<void> {
    this.signal('SIGKILL');
    await this.waitForExit(10_000);
  }
}

export function startCli(label: string, args: readonly string[], env: Record<string, string>): CliProcess {
  return new CliProcess(label, args, env);
}

export async function killAll(processes: Iterable<CliProcess>): Promise<void> {
  await Promise.all([...processes].filter((p) => p.alive).map((p) => p.kill().catch(() => {})));
}

/**
 * A suite that runs `relaybus inbox` against RabbitMQ: registers the hooks that open a schema of its own (`label`) and
 * a `RabbitAdmin` before the suite and, after it, kill every process `run` started and clean both up.
 */
export function useInboxCli(label: string): {
  readonly admin: RabbitAdmin;
  run(name: string, args: readonly string[], env?: Record<string, string>): CliProcess;
} {
  let db: TestSchema | undefined;
  let admin: RabbitAdmin | undefined;
  const processes: CliProcess[] = [];
  before(async () => {
    db = await openSchema(label);
    admin = await RabbitAdmin.open();
  });
  after(async () => {
    await killAll(processes);
    await admin?.close();
    await db?.drop();
  });
  return {
    get admin() {
      if (!admin) throw new Error('useInboxCli: the admin exists once the suite has started');
      return admin;
    },
    run(name, args, env = {}) {
      if (!db) throw new Error("useInboxCli: run() is for the suite's tests, after its before hook");
      const started = startCli(name, args, { DATABASE_URL: db.url, RB_SCHEMA_B: db.schema, AMQP_URL, ...env });
      processes.push(started);
      return started;
    },
  };
}
