/**
 * The CLI's surface without a database: the bin runs as an executable (shebang, mode), `--version`
 * and every `--help` read well, and mistakes (a bad flag, an unknown command, a missing or broken
 * config module, no database URL) print exactly one `relaybus: ...` line and exit non-zero.
 */
import assert from 'node:assert/strict';
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { BIN, IMPORTS, lines, REPO, runCli, startCli, tempDir, useBuiltCli, writeModule } from './support.js';

useBuiltCli();

const COMMANDS = [
  'worker',
  'inbox',
  'demo',
  'setup',
  'upgrade',
  'sql',
  'stats',
  'dead list',
  'dead requeue',
  'purge',
  'dashboard',
  'subscriptions',
];

/** Assert `result` failed with `code` and exactly one stderr line matching `pattern`, nothing on stdout. */
function assertOneLineError(
  result: { code: number | null; stdout: string; stderr: string },
  code: number,
  pattern: RegExp,
): void {
  assert.equal(result.code, code, `exit ${code}\n${result.stdout}\n${result.stderr}`);
  assert.equal(result.stdout, '');
  assert.equal(lines(result.stderr).length, 1, `one line on stderr, got:\n${result.stderr}`);
  assert.match(result.stderr, /^relaybus: /);
  assert.match(result.stderr, pattern);
}

describe('relaybus: bin, version and help (built bin)', () => {
  it('the built bin is executable and --version prints the package version', { timeout: 30_000 }, async () => {
    const packageJson = JSON.parse(readFileSync(join(REPO, 'package.json'), 'utf8')) as {
      version: string;
      bin: Record<string, string>;
    };
    assert.equal(join(REPO, packageJson.bin.relaybus!), BIN);
    assert.ok(readFileSync(BIN, 'utf8').startsWith('#!/usr/bin/env node\n'), 'the shebang survives the build');
    assert.ok((statSync(BIN).mode & 0o111) !== 0, 'npm run build leaves the bin executable');
    const result = await runCli(['--version'], { direct: true });
    assert.equal(result.code, 0, result.stderr);
    assert.equal(result.stdout, `${packageJson.version}\n`);
  });

  it('--help lists every command and the exit codes', { timeout: 30_000 }, async () => {
    const result = await runCli(['--help']);
    assert.equal(result.code, 0);
    assert.match(result.stdout, /^Usage: relaybus <command> \[options\]/);
    for (const command of COMMANDS) assert.match(result.stdout, new RegExp(`^  ${command}\\s+\\S`, 'm'));
    assert.match(result.stdout, /Exit codes:\n {2}0 {4}success\n {2}1 {4}runtime failure/);
    const bare = await runCli([]);
    assert.equal(bare.code, 2, 'no command is a usage error');
    assert.match(bare.stderr, /^Usage: relaybus <command>/);
  });

  for (const command of COMMANDS) {
    it(`relaybus ${command} --help reads well`, { timeout: 30_000 }, async () => {
      const result = await runCli([...command.split(' '), '--help']);
      assert.equal(result.code, 0, result.stderr);
      assert.equal(result.stderr, '');
      const out = lines(result.stdout);
      assert.match(out[0]!, new RegExp(`^Usage: relaybus ${command}`));
      assert.ok(out.includes('Options:'));
      assert.ok(out.some((line) => /^ {2}-h, --help +Show this help\.$/.test(line)));
      assert.ok(
        out.some((line) => line === 'Exit codes:'),
        'exit codes are documented',
      );
      for (const line of out) assert.ok(line.length <= 100, `line longer than 100 columns: ${line}`);
      const viaHelp = await runCli(['help', ...command.split(' ')]);
      assert.equal(viaHelp.stdout, result.stdout, 'relaybus help <command> prints the same');
    });
  }

  it('relaybus dead alone explains its subcommands', { timeout: 30_000 }, async () => {
    const help = await runCli(['dead', '--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /^Usage: relaybus dead <list\|requeue>/);
    assertOneLineError(await runCli(['dead']), 2, /needs a subcommand: list or requeue/);
    assertOneLineError(await runCli(['dead', 'bury']), 2, /unknown command "dead bury"/);
  });

  it('relaybus handlers alone explains its subcommands', { timeout: 30_000 }, async () => {
    const help = await runCli(['handlers', '--help']);
    assert.equal(help.code, 0);
    assert.match(help.stdout, /^Usage: relaybus handlers <pause\|resume\|list>/);
    assertOneLineError(await runCli(['handlers']), 2, /needs a subcommand: pause, resume or list/);
    assertOneLineError(await runCli(['handlers', 'stop']), 2, /unknown command "handlers stop"/);
  });
});

describe('relaybus: usage errors are one line and exit non-zero (built bin)', () => {
  it('a bad flag', { timeout: 30_000 }, async () => {
    assertOneLineError(
      await runCli(['stats', '--bogus']),
      2,
      /^relaybus: unknown option '--bogus' \(see relaybus stats --help\)\n$/,
    );
    assertOneLineError(await runCli(['worker', '--concurrency']), 2, /--concurrency <value>' argument missing/);
    assertOneLineError(
      await runCli(['worker', '--concurrency', 'many']),
      2,
      /^relaybus: --concurrency must be an integer from 1 to 1000, got "many"\n$/,
    );
    assertOneLineError(
      await runCli(['worker', '--followers', '101']),
      2,
      /^relaybus: --followers must be an integer from 0 to 100, got "101"\n$/,
    );
    assertOneLineError(
      await runCli(['worker', '--log-level', 'loud']),
      2,
      /^relaybus: --log-level must be one of debug, info, warn, error, got "loud"\n$/,
    );
    assertOneLineError(
      await runCli(['worker', '--log-format', 'xml']),
      2,
      /^relaybus: --log-format must be one of pretty, json, got "xml"\n$/,
    );
    assertOneLineError(await runCli(['--bogus']), 2, /unknown option --bogus before the command/);
  });

  it('an unknown command', { timeout: 30_000 }, async () => {
    assertOneLineError(
      await runCli(['wrok']),
      2,
      /^relaybus: unknown command "wrok"; commands: worker, inbox, demo, setup, upgrade, sql, stats, dead, cancel, handlers, purge, dashboard/,
    );
  });

  it('a missing config module: none in the working directory, or a path that does not exist', {
    timeout: 30_000,
  }, async () => {
    const cwd = tempDir('no-config');
    assertOneLineError(
      await runCli(['worker'], { cwd }),
      2,
      /^relaybus: no config module: pass one .* or create relaybus\.config\.ts, relaybus\.config\.js, relaybus\.config\.mjs in /,
    );
    assertOneLineError(
      await runCli(['worker', 'nope.mjs'], { cwd }),
      2,
      /^relaybus: config module not found: nope\.mjs/,
    );
  });

  it('a config module without a bus, one that throws, and one of an unknown kind', { timeout: 30_000 }, async () => {
    const dir = tempDir('bad-config');
    writeModule(dir, 'empty.mjs', 'export const x = 1;\n');
    writeModule(dir, 'factory.mjs', 'export default function makeBus() {}\n');
    writeModule(
      dir,
      'throws.mjs',
      `import { InvalidOptionsError } from '${IMPORTS.relaybus}';\nthrow new InvalidOptionsError('createRelayBus: \`store\` is required.');\n`,
    );
    writeModule(dir, 'bus.json', '{}');
    assertOneLineError(
      await runCli(['worker', 'empty.mjs'], { cwd: dir }),
      2,
      /^relaybus: empty\.mjs has no default export; export the bus itself: export default createRelayBus/,
    );
    assertOneLineError(
      await runCli(['worker', 'factory.mjs'], { cwd: dir }),
      2,
      /factory\.mjs exports a function by default; export the bus itself/,
    );
    assertOneLineError(
      await runCli(['worker', 'throws.mjs'], { cwd: dir }),
      1,
      /^relaybus: loading throws\.mjs failed: createRelayBus: `store` is required\.\n$/,
    );
    assertOneLineError(await runCli(['worker', 'bus.json'], { cwd: dir }), 2, /must be \.js, \.mjs or \.ts/);
    const verbose = await runCli(['worker', 'throws.mjs', '--verbose'], { cwd: dir });
    assert.equal(verbose.code, 1);
    assert.ok(lines(verbose.stderr).length > 2, 'with --verbose the stack trace follows');
    assert.match(verbose.stderr, /caused by: InvalidOptionsError: createRelayBus/);
  });

  it('a bus whose database is down: the worker retries the start, and SIGTERM during the backoff exits 0 at once', {
    timeout: 30_000,
  }, async () => {
    const dir = tempDir('down');
    writeModule(
      dir,
      'bus.mjs',
      `
import pg from '${IMPORTS.pg}';
import { createRelayBus, defineEvent, Type } from '${IMPORTS.relaybus}';
import { fromPg, postgresStore } from '${IMPORTS.postgres}';
const pool = new pg.Pool({ connectionString: 'postgres://postgres@127.0.0.1:1/none', connectionTimeoutMillis: 2000 });
const Ping = defineEvent('ping', Type.Object({}));
const bus = createRelayBus({ store: postgresStore({ driver: fromPg(pool) }), events: [Ping] });
bus.on(Ping, 'pong', () => {});
export default bus;
`,
    );
    const worker = startCli(['worker', 'bus.mjs'], { cwd: dir });
    await worker.waitFor(
      /database still unreachable; starting again after a backoff attempt=2 retryAt=\S+ retryInMs=\d+ error=".*ECONNREFUSED/,
    );
    const signalledAt = Date.now();
    worker.child.kill('SIGTERM');
    const result = await worker.exited;
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
    assert.ok(Date.now() - signalledAt < 3_000, 'the backoff does not delay the stop');
    assert.match(result.stdout, /SIGTERM received; stopping gracefully/);
    assert.match(result.stdout, /stopped; 0 delivered, 0 failed attempts, 0 dead\n$/);
  });

  it('an admin command without a database', { timeout: 30_000 }, async () => {
    assertOneLineError(
      await runCli(['stats'], { env: { DATABASE_URL: undefined } }),
      2,
      /^relaybus: no database: pass --database-url .* or set DATABASE_URL\n$/,
    );
  });
});
