/**
 * relaybus the way a user gets it, for tests that follow a documented flow in a fresh directory
 * outside the repository: the package built in a copy of its sources (`npm run build`), packed
 * (`npm pack`, checked for its contents), and installed from that tarball into a new project
 * together with the project's other dependencies (from the local npm cache, which `npm ci` filled).
 * Each Postgres flow gets a database of its own, dropped afterwards.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import pg from 'pg';
import { STATEMENT_NAMES, statementPath } from '../../src/postgres/statements.js';

const execFileAsync = promisify(execFile);
export const REPO_ROOT = fileURLToPath(new URL('../../', import.meta.url));

/** The environment of a command a user types: none of an enclosing `npm test`'s npm_* variables. */
export function userEnv(env: Record<string, string | undefined> = {}): Record<string, string | undefined> {
  const clean = Object.fromEntries(
    Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith('npm_')),
  );
  return { ...clean, NO_UPDATE_NOTIFIER: '1', ...env };
}

/** Run a command; on failure the error carries its output and exit code. */
export async function run(
  command: string,
  args: readonly string[],
  cwd: string,
  env: Record<string, string | undefined> = {},
  timeout = 120_000,
): Promise<string> {
  try {
    const { stdout, stderr } = await execFileAsync(command, [...args], {
      cwd,
      env: userEnv(env),
      timeout,
      maxBuffer: 32 * 1024 * 1024,
    });
    return `${stdout}${stderr}`;
  } catch (error) {
    const { stdout = '', stderr = '', code } = error as { stdout?: string; stderr?: string; code?: unknown };
    throw new Error(`${command} ${args.join(' ')} failed (exit ${String(code)}) in ${cwd}:\n${stdout}\n${stderr}`, {
      cause: error,
    });
  }
}

/** Files the tarball must carry for every documented flow to work. */
const PACKED_FILES = [
  'dist/src/index.js',
  'dist/src/index.d.ts',
  'dist/src/cli/main.js',
  'dist/src/postgres/index.js',
  'dist/src/postgres/drivers/kysely-driver.js',
  'dist/src/postgres/drivers/drizzle-driver.d.ts',
  'dist/schema/index.js',
  // Every statement file in its folder, and a fragment: the store reads them at run time.
  ...STATEMENT_NAMES.map(statementPath),
  'sql/fragments/claimed-rows.sql',
  'schema/migrations/meta/_journal.json',
  'schema/postgres-supplement.sql',
];

let packed: Promise<string> | undefined;

/**
 * The path of relaybus's tarball, built and packed once per process under `work`. The repository's
 * own dist/ stays untouched (other test processes may be using it).
 */
export function packedTarball(work: string): Promise<string> {
  packed ??= (async () => {
    const staging = join(work, 'package');
    mkdirSync(staging);
    for (const path of ['package.json', 'tsconfig.json', 'tsconfig.build.json', 'README.md', 'src', 'schema', 'sql']) {
      cpSync(join(REPO_ROOT, path), join(staging, path), { recursive: true });
    }
    symlinkSync(join(REPO_ROOT, 'node_modules'), join(staging, 'node_modules'), 'dir');
    await run('npm', ['run', 'build'], staging);
    assert.ok(existsSync(join(staging, 'dist/src/index.js')), 'npm run build writes dist/');
    const result = JSON.parse(
      await run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', work, '--loglevel=error'], staging),
    ) as { filename: string; files: { path: string }[] }[];
    const files = new Set(result[0]!.files.map((f) => f.path));
    for (const file of PACKED_FILES) assert.ok(files.has(file), `the tarball contains ${file}`);
    assert.ok(
      ![...files].some((f) => f.startsWith('src/') || f.startsWith('test/')),
      'no sources or tests in the tarball',
    );
    return join(work, result[0]!.filename);
  })();
  return packed;
}

/** A temporary folder outside the repository, removed by `removeWork`. */
export function workDir(label: string): string {
  return mkdtempSync(join(tmpdir(), `relaybus-${label}-`));
}

export function removeWork(work: string): void {
  rmSync(work, { recursive: true, force: true });
}

/**
 * A new project in `dir` as a user starts one (`npm init -y`, ES modules), with relaybus installed
 * from the tarball and `dependencies` / `devDependencies` (names, or name@version) from the npm cache.
 */
export async function freshProject(
  dir: string,
  tarball: string,
  dependencies: readonly string[],
  devDependencies: readonly string[] = [],
): Promise<string> {
  mkdirSync(dir, { recursive: true });
  writeFileSync(
    join(dir, 'package.json'),
    `${JSON.stringify({ name: 'app', version: '1.0.0', private: true, type: 'module' }, null, 2)}\n`,
  );
  const flags = ['--prefer-offline', '--no-audit', '--no-fund', '--loglevel=error'];
  await run('npm', ['install', ...flags, tarball, ...dependencies.map(pinned)], dir);
  if (devDependencies.length > 0)
    await run('npm', ['install', '--save-dev', ...flags, ...devDependencies.map(pinned)], dir);
  return dir;
}

/** `name` at the version this repository's lockfile has, so the install is served from the npm cache. */
export function pinned(name: string): string {
  if (name.lastIndexOf('@') > 0) return name;
  const lock = JSON.parse(readFileSync(join(REPO_ROOT, 'package-lock.json'), 'utf8')) as {
    packages: Record<string, { version?: string }>;
  };
  const version = lock.packages[`node_modules/${name}`]?.version;
  return version === undefined ? name : `${name}@${version}`;
}

/** Databases made for flows, each dropped by `drop()`. */
export class FlowDatabases {
  readonly #admin: pg.Pool;
  readonly #names: string[] = [];

  constructor(readonly url: string) {
    this.#admin = new pg.Pool({ connectionString: url, max: 1 });
    // Its connection idles through a whole flow: a backend terminated meanwhile (another test's forced drop, a server
    // restart) is an 'error' event here, which without a listener kills the test process after the test ended.
    this.#admin.on('error', () => {});
  }

  /** A new, empty database; its URL. */
  async create(label: string): Promise<string> {
    const name = `relaybus_flow_${label}_${process.pid}_${Date.now()}`;
    await this.#admin.query(`CREATE DATABASE "${name}"`);
    this.#names.push(name);
    const target = new URL(this.url);
    target.pathname = `/${name}`;
    return target.toString();
  }

  async drop(): Promise<void> {
    for (const name of this.#names) await this.#admin.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
    await this.#admin.end();
  }
}
