/**
 * A throwaway Postgres cluster of the test's own, for tests that stop, kill and restart the
 * database (the chaos suite): `initdb` into a temporary folder, `pg_ctl` on a free port of
 * 127.0.0.1, trust auth, fsync off (a crash restart is still a real immediate-mode stop: the
 * postmaster and its backends die without a checkpoint and the start replays the WAL).
 *
 * initdb refuses to run as root, so under root every binary runs as the `postgres` OS user
 * (`runuser -u postgres --`) and the folder is chowned to it. The cluster is always removed: by
 * `dispose()`, by an exit/signal hook of the test process, and by a detached watchdog that stops it
 * if the test process dies without running either (SIGKILL).
 */
import { execFile, execFileSync, spawn, spawnSync } from 'node:child_process';
import { appendFileSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

/** Where Debian/Ubuntu put the PostgreSQL 15 binaries; override with PRIVATE_PG_BIN. */
export const PG_BIN = process.env.PRIVATE_PG_BIN ?? '/usr/lib/postgresql/15/bin';

const RUN_AS = 'postgres';
const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
const COMMAND_TIMEOUT_MS = 60_000;

/** Why a private cluster cannot run here, or undefined when it can. */
export function privatePostgresSkipReason(): string | undefined {
  for (const binary of ['initdb', 'pg_ctl', 'postgres']) {
    if (!existsSync(join(PG_BIN, binary)))
      return `no ${binary} in ${PG_BIN} (install PostgreSQL 15 server binaries or set PRIVATE_PG_BIN)`;
  }
  if (isRoot) {
    if (!existsSync('/usr/sbin/runuser') && !existsSync('/sbin/runuser') && !existsSync('/usr/bin/runuser')) {
      return 'running as root and runuser is missing (initdb refuses root; the cluster must run as the postgres user)';
    }
    if (spawnSync('id', ['-u', RUN_AS]).status !== 0)
      return `running as root and there is no "${RUN_AS}" OS user to run the cluster as`;
  }
  return undefined;
}

export type StopMode = 'fast' | 'immediate';

export interface PrivatePostgres {
  readonly port: number;
  /** `postgres://postgres@127.0.0.1:<port>/postgres` */
  readonly url: string;
  readonly dataDir: string;
  /** True between a successful start and the next stop. */
  readonly running: boolean;
  /** Start the stopped cluster; resolves once it accepts connections. */
  start(): Promise<void>;
  /** `pg_ctl stop -m <mode>`: `fast` disconnects clients and checkpoints; `immediate` is a crash (recovery at the next start). */
  stop(mode: StopMode): Promise<void>;
  /** `pg_ctl restart -m fast`; resolves once the cluster accepts connections again. */
  restart(): Promise<void>;
  /** Terminate every client backend except the one issuing the call (and `except`); resolves once they are gone. Returns how many. */
  terminateAllBackends(except?: readonly number[]): Promise<number>;
  /** The last `lines` lines of the server log. */
  logTail(lines?: number): string;
  /** Stop (immediate) and delete the cluster; safe to call twice. */
  dispose(): Promise<void>;
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address !== null ? address.port : 0;
      server.close(() => (port > 0 ? resolve(port) : reject(new Error('no free port'))));
    });
  });
}

/** The command line that runs `binary` as the cluster's OS user. */
function commandLine(binary: string, args: readonly string[]): [string, string[]] {
  const path = join(PG_BIN, binary);
  return isRoot ? ['runuser', ['-u', RUN_AS, '--', path, ...args]] : [path, [...args]];
}

/** A clean environment: no PG* variables of the caller may point a binary elsewhere. */
const ENV: NodeJS.ProcessEnv = { PATH: process.env.PATH ?? '/usr/bin:/bin', LANG: 'C', LC_ALL: 'C' };

function run(binary: string, args: readonly string[]): Promise<string> {
  const [command, argv] = commandLine(binary, args);
  return new Promise((resolve, reject) => {
    execFile(
      command,
      argv,
      { env: ENV, timeout: COMMAND_TIMEOUT_MS, maxBuffer: 4 * 1024 * 1024 },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`${binary} ${args.join(' ')} failed: ${error.message}\n${stdout}${stderr}`));
        else resolve(`${stdout}${stderr}`);
      },
    );
  });
}

const live = new Set<() => void>();
let hooked = false;

/** Synchronous last-resort cleanup of every live cluster, on exit and on a terminating signal. */
function hookProcess(): void {
  if (hooked) return;
  hooked = true;
  const cleanAll = (): void => {
    for (const clean of [...live]) clean();
  };
  process.on('exit', cleanAll);
  for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
    process.once(signal, () => {
      cleanAll();
      process.kill(process.pid, signal); // the default action, now that the listener is gone
    });
  }
}

/** Create a cluster with `initdb` and start it. `settings` are appended to postgresql.conf. */
export async function startPrivatePostgres(
  options: { readonly settings?: Readonly<Record<string, string | number>> } = {},
): Promise<PrivatePostgres> {
  const skip = privatePostgresSkipReason();
  if (skip !== undefined) throw new Error(`cannot run a private Postgres: ${skip}`);
  const root = mkdtempSync(join(tmpdir(), 'relaybus-private-pg-'));
  const dataDir = join(root, 'data');
  const logFile = join(root, 'server.log');
  if (isRoot) {
    const uid = Number(execFileSync('id', ['-u', RUN_AS], { encoding: 'utf8' }).trim());
    const gid = Number(execFileSync('id', ['-g', RUN_AS], { encoding: 'utf8' }).trim());
    chownSync(root, uid, gid);
  }

  let running = false;
  let disposed = false;
  let watchdog: number | undefined;
  const pgCtl = (args: readonly string[]) => run('pg_ctl', ['-D', dataDir, ...args]);

  // Synchronous removal (exit hooks); dispose() does the same asynchronously.
  const cleanSync = (): void => {
    live.delete(cleanSync);
    if (existsSync(join(dataDir, 'postmaster.pid'))) {
      const [command, argv] = commandLine('pg_ctl', ['-D', dataDir, 'stop', '-m', 'immediate', '-w', '-t', '20']);
      spawnSync(command, argv, { env: ENV, stdio: 'ignore', timeout: 30_000 });
    }
    rmSync(root, { recursive: true, force: true });
    if (watchdog !== undefined) {
      try {
        process.kill(watchdog, 'SIGKILL');
      } catch {
        // already gone
      }
    }
  };
  live.add(cleanSync);
  hookProcess();

  try {
    await run('initdb', [
      '-D',
      dataDir,
      '-U',
      'postgres',
      '--auth=trust',
      '--encoding=UTF8',
      '--locale=C',
      '--no-sync',
      '--no-instructions',
    ]);
    const port = await freePort();
    const settings: Record<string, string | number> = {
      port,
      listen_addresses: "'127.0.0.1'",
      unix_socket_directories: `'${root}'`,
      fsync: 'off',
      synchronous_commit: 'off',
      full_page_writes: 'off',
      max_connections: 200,
      ...options.settings,
    };
    appendFileSync(
      join(dataDir, 'postgresql.conf'),
      `\n# private-postgres.ts\n${Object.entries(settings)
        .map(([name, value]) => `${name} = ${value}`)
        .join('\n')}\n`,
    );

    // A watchdog that outlives this process only to stop and delete the cluster if the process dies uncleanly.
    const [stopCommand, stopArgs] = commandLine('pg_ctl', ['-D', dataDir, 'stop', '-m', 'immediate', '-w', '-t', '20']);
    const quoted = [stopCommand, ...stopArgs].map((part) => `'${part.replace(/'/g, `'\\''`)}'`).join(' ');
    const dog = spawn(
      'sh',
      ['-c', `while kill -0 ${process.pid} 2>/dev/null; do sleep 2; done; ${quoted} >/dev/null 2>&1; rm -rf '${root}'`],
      {
        detached: true,
        stdio: 'ignore',
        env: ENV,
      },
    );
    dog.unref();
    watchdog = dog.pid;

    const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    const cluster: PrivatePostgres = {
      port,
      url,
      dataDir,
      get running() {
        return running;
      },
      async start() {
        await pgCtl(['start', '-w', '-t', '60', '-l', logFile]);
        running = true;
      },
      async stop(mode) {
        running = false;
        await pgCtl(['stop', '-m', mode, '-w', '-t', '60']);
      },
      async restart() {
        running = false;
        await pgCtl(['restart', '-m', 'fast', '-w', '-t', '60', '-l', logFile]);
        running = true;
      },
      async terminateAllBackends(except = []) {
        const client = new pg.Client({ connectionString: url, application_name: 'private-postgres-terminator' });
        client.on('error', () => {});
        await client.connect();
        try {
          // Signal them all at once (the timeout form of pg_terminate_backend waits for each in turn), then wait until they are gone.
          const { rows } = await client.query<{ pids: number[] }>(
            `SELECT coalesce(array_agg(pid) FILTER (WHERE pg_terminate_backend(pid)), '{}') AS pids FROM pg_stat_activity
             WHERE backend_type = 'client backend' AND pid <> pg_backend_pid() AND NOT (pid = ANY($1::int[]))`,
            [[...except]],
          );
          const pids = rows[0]!.pids;
          const deadline = Date.now() + 10_000;
          while (Date.now() < deadline) {
            const left = await client.query<{ n: number }>(
              'SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = ANY($1::int[])',
              [pids],
            );
            if (left.rows[0]!.n === 0) break;
            await new Promise((resolve) => setTimeout(resolve, 10));
          }
          return pids.length;
        } finally {
          await client.end().catch(() => {});
        }
      },
      logTail(lines = 40) {
        try {
          return readFileSync(logFile, 'utf8')
            .split('\n')
            .slice(-lines - 1)
            .join('\n');
        } catch {
          return '(no server log)';
        }
      },
      async dispose() {
        if (disposed) return;
        disposed = true;
        live.delete(cleanSync);
        if (existsSync(join(dataDir, 'postmaster.pid')))
          await pgCtl(['stop', '-m', 'immediate', '-w', '-t', '30']).catch(() => {});
        running = false;
        cleanSync();
      },
    };
    await cluster.start();
    return cluster;
  } catch (error) {
    cleanSync();
    throw error;
  }
}
