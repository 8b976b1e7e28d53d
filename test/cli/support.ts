/**
 * Helpers for the CLI tests, which run the real built bin (`dist/src/cli/main.js`) as a user would.
 * `useBuiltCli()` registers a `before` hook that runs `npm run build` once, and only when a source
 * file is newer than the built bin; a lock directory keeps two test files (or two test runs) from
 * building at the same time.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { before } from 'node:test';

/** The repository root. */
export const REPO = fileURLToPath(new URL('../../', import.meta.url));
/** The built bin, as package.json's "bin" names it. */
export const BIN = join(REPO, 'dist/src/cli/main.js');

const SOURCES = ['src', 'schema'];
const CONFIGS = ['tsconfig.json', 'tsconfig.build.json', 'package.json'];
const LOCK = join(tmpdir(), `relaybus-cli-build-${Buffer.from(REPO).toString('hex').slice(-24)}.lock`);
const STALE_LOCK_MS = 120_000;

function newestMtime(path: string): number {
  const stat = statSync(path, { throwIfNoEntry: false });
  if (stat === undefined) return 0;
  if (!stat.isDirectory()) return /\.(ts|json)$/.test(path) ? stat.mtimeMs : 0;
  return Math.max(0, ...readdirSync(path).map((name) => newestMtime(join(path, name))));
}

function isFresh(): boolean {
  const built = statSync(BIN, { throwIfNoEntry: false });
  if (built === undefined) return false;
  const newest = Math.max(
    ...SOURCES.map((dir) => newestMtime(join(REPO, dir))),
    ...CONFIGS.map((file) => newestMtime(join(REPO, file))),
  );
  return built.mtimeMs >= newest;
}

async function acquireLock(): Promise<void> {
  for (;;) {
    try {
      mkdirSync(LOCK);
      return;
    } catch {
      const stat = statSync(LOCK, { throwIfNoEntry: false });
      if (stat !== undefined && Date.now() - stat.mtimeMs > STALE_LOCK_MS)
        rmSync(LOCK, { recursive: true, force: true });
      await sleep(200);
    }
  }
}

/** Run `npm run build` unless the built bin is newer than every source file. */
export async function buildOnce(): Promise<void> {
  if (isFresh()) return;
  await acquireLock();
  try {
    if (isFresh()) return; // another test file built it while this one waited
    try {
      await promisify(execFile)('npm', ['run', 'build'], { cwd: REPO, maxBuffer: 16 * 1024 * 1024 });
    } catch (error) {
      const { stdout = '', stderr = '' } = error as { stdout?: string; stderr?: string };
      throw new Error(`npm run build failed:\n${stdout}${stderr}`);
    }
  } finally {
    rmSync(LOCK, { recursive: true, force: true });
  }
}

/** Register the build as a `before` hook of the calling test file. */
export function useBuiltCli(): void {
  before(buildOnce, { timeout: 120_000 });
}

/** What a finished CLI process left behind. */
export interface CliResult {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** Options of a CLI run. */
export interface CliOptions {
  readonly cwd?: string;
  /** Merged over the test process's environment; a value of undefined removes the variable. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** Kill the process (SIGKILL) after this long; default 60 s. */
  readonly timeoutMs?: number;
  /** Run the bin file itself (shebang and executable bit) instead of `node <bin>`. */
  readonly direct?: boolean;
}

/** A CLI process that is still running. */
export interface RunningCli {
  readonly child: ChildProcess;
  /** Output so far. */
  output(): { stdout: string; stderr: string };
  /** Resolve once stdout or stderr matches `pattern`; reject after `timeoutMs` or when the process ends first. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<void>;
  /** Resolves when the process has exited. */
  readonly exited: Promise<CliResult>;
}

function environment(extra: CliOptions['env']): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = { ...process.env };
  for (const [name, value] of Object.entries(extra ?? {})) {
    if (value === undefined) delete env[name];
    else env[name] = value;
  }
  return env;
}

/** Start the built bin with `args`. */
export function startCli(args: readonly string[], options: CliOptions = {}): RunningCli {
  const [command, argv] = options.direct ? [BIN, [...args]] : [process.execPath, [BIN, ...args]];
  const child = spawn(command, argv, {
    cwd: options.cwd ?? REPO,
    env: environment(options.env),
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let stdout = '';
  let stderr = '';
  const listeners = new Set<() => void>();
  child.stdout!.setEncoding('utf8').on('data', (chunk: string) => {
    stdout += chunk;
    listeners.forEach((listener) => listener());
  });
  child.stderr!.setEncoding('utf8').on('data', (chunk: string) => {
    stderr += chunk;
    listeners.forEach((listener) => listener());
  });
  const timer = setTimeout(() => child.kill('SIGKILL'), options.timeoutMs ?? 60_000);
  const exited = new Promise<CliResult>((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      listeners.forEach((listener) => listener());
      resolve({ code, signal, stdout, stderr });
    });
  });
  return {
    child,
    output: () => ({ stdout, stderr }),
    exited,
    waitFor(pattern, timeoutMs = 20_000) {
      return new Promise<void>((resolve, reject) => {
        const check = (): void => {
          if (pattern.test(stdout) || pattern.test(stderr)) {
            finish();
            resolve();
          } else if (child.exitCode !== null || child.signalCode !== null) {
            finish();
            reject(new Error(`the CLI exited before printing ${pattern}:\nstdout: ${stdout}\nstderr: ${stderr}`));
          }
        };
        const timeout = setTimeout(() => {
          finish();
          reject(new Error(`no ${pattern} within ${timeoutMs} ms:\nstdout: ${stdout}\nstderr: ${stderr}`));
        }, timeoutMs);
        const finish = (): void => {
          clearTimeout(timeout);
          listeners.delete(check);
        };
        listeners.add(check);
        check();
      });
    },
  };
}

/** Run the built bin with `args` to the end. */
export function runCli(args: readonly string[], options: CliOptions = {}): Promise<CliResult> {
  return startCli(args, options).exited;
}

const tempDirs: string[] = [];
process.on('exit', () => tempDirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

/** A temporary directory, removed when the test process exits. */
export function tempDir(label: string): string {
  const dir = mkdtempSync(join(tmpdir(), `relaybus-cli-${label}-`));
  tempDirs.push(dir);
  return dir;
}

const require = createRequire(import.meta.url);

/** `file:` URLs a config module outside the repository imports: the built library and `pg`. */
export const IMPORTS = {
  relaybus: pathToFileURL(join(REPO, 'dist/src/index.js')).href,
  postgres: pathToFileURL(join(REPO, 'dist/src/postgres/index.js')).href,
  pg: pathToFileURL(require.resolve('pg')).href,
} as const;

/** Write `source` to `dir/name` and return its path. */
export function writeModule(dir: string, name: string, source: string): string {
  const path = join(dir, name);
  writeFileSync(path, source);
  return path;
}

/** The lines of `text`, without the final empty one. */
export function lines(text: string): string[] {
  return text.split('\n').filter((line, i, all) => !(i === all.length - 1 && line === ''));
}
