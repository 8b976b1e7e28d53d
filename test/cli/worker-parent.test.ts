/**
 * A worker stops with its parent process only when npm started it (npx relaybus worker; covered in
 * worker-resilience.test.ts) or when asked: started detached on purpose (a launcher script that runs
 * it under setsid, an npm script with `nohup ... &`) it keeps running after its launcher exited and
 * still drains; with --exit-with-parent it stops gracefully when its parent exits, with exit code 129
 * and a log line that says why. The exit code is the one Node exits with, written by the config's
 * `process.on('exit')` (an orphan's status goes to its new parent, not to the test).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { PARENT_CHECK_MS } from '../../src/cli/parent-watch.js';
import { findPostgres } from '../support/databases.js';
import { isRunning, RECORDING_CONFIG, useRecordingSchema } from './recording-worker.js';
import { BIN, REPO, tempDir, useBuiltCli, writeModule } from './support.js';

const found = await findPostgres();
useBuiltCli();

/** One handler that records each run in `<schema>.handled`; the exit code goes to EXIT_FILE. */

/** Shell: wait (at most 30 s) until the worker logging to `log` runs, as a launcher that checks its start does. */
const UNTIL_RUNNING = (log: string) =>
  `for i in $(seq 300); do grep -q 'as owner' "${log}" 2>/dev/null && break; sleep 0.1; done`;

/** Run `command` to its end; its exit code and output. */
function runToEnd(
  command: string,
  args: readonly string[],
  options: { cwd: string; env: NodeJS.ProcessEnv },
): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(command, [...args], { ...options, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.on('error', reject);
    child.on('close', (code) => resolve({ code, output }));
  });
}

describe('relaybus worker and its parent process (real Postgres, built bin)', {
  skip: 'skip' in found ? found.skip : process.platform !== 'linux' ? 'needs /proc and setsid (Linux)' : undefined,
}, () => {
  const url = 'url' in found ? found.url : 'postgres://postgres@127.0.0.1:5432/test';
  const recording = useRecordingSchema(url, 'cli_parent');
  const { schema, leftovers } = recording;
  const handled = recording.runs;
  const publish = (count: number) => recording.publish(count, { keys: 3 });

  async function waitUntil(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
      await sleep(50);
    }
  }

  const read = (path: string) => (existsSync(path) ? readFileSync(path, 'utf8') : '');

  /** The pid of the worker logging to `log`, once it runs (from `as owner host:pid:random`). */
  async function workerPid(log: string): Promise<number> {
    await waitUntil(`the worker logs its owner in ${log}`, () => / as owner \S+/.test(read(log)));
    const pid = Number(/ as owner (\S+)/.exec(read(log))![1]!.split(':').at(-2));
    leftovers.push(pid);
    return pid;
  }

  /** A detached worker whose launcher is gone: still running past the parent check, drains a new publish, SIGTERM -> 0. */
  async function keepsRunningAndDrains(pid: number, log: string, exitFile: string): Promise<void> {
    await sleep(3 * PARENT_CHECK_MS);
    assert.equal(isRunning(pid), true, `the worker runs on after its launcher exited\n${read(log)}`);
    assert.doesNotMatch(read(log), /parent process/);
    const before = await handled();
    await publish(12);
    await waitUntil('the detached worker drained the new events', async () => (await handled()) === before + 12);
    process.kill(pid, 'SIGTERM');
    await waitUntil('the worker stopped', () => !isRunning(pid));
    assert.equal(read(exitFile), '0', `a worker stopped by SIGTERM exits 0\n${read(log)}`);
    assert.match(read(log), /SIGTERM received; stopping gracefully/);
    assert.match(read(log), /stopped; 12 delivered, 0 failed attempts, 0 dead/);
  }

  it('a launcher script that starts it with setsid in the background and exits: the worker keeps running and drains', {
    timeout: 60_000,
  }, async () => {
    const log = join(recording.dir, 'setsid.log');
    const exitFile = join(recording.dir, 'setsid.exit');
    const launcher = writeModule(
      recording.dir,
      'launch.sh',
      // It waits until the worker runs, then exits: the worker outlives the parent it started with.
      `#!/bin/sh\nsetsid "${process.execPath}" "${BIN}" worker bus.mjs > "${log}" 2>&1 < /dev/null &\n${UNTIL_RUNNING(log)}\necho launched\n`,
    );
    const launched = await runToEnd('sh', [launcher], {
      cwd: recording.dir,
      env: { ...process.env, DATABASE_URL: url, TEST_SCHEMA: schema, EXIT_FILE: exitFile },
    });
    assert.equal(launched.code, 0, launched.output);
    const pid = await workerPid(log);
    await keepsRunningAndDrains(pid, log, exitFile);
  });

  it('an npm script that starts it with nohup ... & (npm run launch, then npm exits): the worker keeps running and drains', {
    timeout: 60_000,
  }, async () => {
    const project = tempDir('npm-launch');
    const log = join(project, 'worker.log');
    const exitFile = join(project, 'worker.exit');
    writeFileSync(
      join(project, 'package.json'),
      JSON.stringify({
        name: 'app',
        private: true,
        type: 'module',
        dependencies: { relaybus: '*' },
        scripts: {
          launch: `nohup relaybus worker bus.mjs > worker.log 2>&1 < /dev/null & ${UNTIL_RUNNING('worker.log')}`,
        },
      }),
    );
    mkdirSync(join(project, 'node_modules/.bin'), { recursive: true });
    symlinkSync(REPO, join(project, 'node_modules/relaybus'), 'dir');
    symlinkSync('../relaybus/dist/src/cli/main.js', join(project, 'node_modules/.bin/relaybus'));
    writeModule(project, 'bus.mjs', RECORDING_CONFIG);
    const launched = await runToEnd('npm', ['run', '--silent', 'launch'], {
      cwd: project,
      env: { ...process.env, DATABASE_URL: url, TEST_SCHEMA: schema, EXIT_FILE: exitFile },
    });
    assert.equal(launched.code, 0, launched.output);
    const pid = await workerPid(log);
    await keepsRunningAndDrains(pid, log, exitFile);
  });

  it('--exit-with-parent: stops gracefully when its launcher exits, exit code 129, and says why', {
    timeout: 60_000,
  }, async (t) => {
    const log = join(recording.dir, 'asked.log');
    const exitFile = join(recording.dir, 'asked.exit');
    // The launcher waits for a line on its stdin, so the test decides when the parent exits.
    const launcher = spawn(
      'sh',
      [
        '-c',
        `"${process.execPath}" "${BIN}" worker bus.mjs --exit-with-parent > "${log}" 2>&1 < /dev/null & read line`,
      ],
      {
        cwd: recording.dir,
        env: { ...process.env, DATABASE_URL: url, TEST_SCHEMA: schema, EXIT_FILE: exitFile },
        stdio: ['pipe', 'ignore', 'ignore'],
      },
    );
    const launcherExited = new Promise<void>((resolve) => launcher.on('exit', () => resolve()));
    t.after(() => launcher.kill('SIGKILL'));
    const pid = await workerPid(log);
    assert.match(read(log), /stops when its parent process exits: --exit-with-parent/);
    const before = await handled();
    await publish(5);
    await waitUntil('the worker drained', async () => (await handled()) === before + 5);

    launcher.stdin!.end('go\n');
    await launcherExited;
    await waitUntil('the worker stopped after its parent', () => !isRunning(pid), 15_000);
    assert.equal(read(exitFile), '129', read(log));
    assert.match(
      read(log),
      /the parent process \(pid \d+\) exited .*watched because --exit-with-parent; exit code 129\); stopping gracefully/,
    );
    assert.match(read(log), /stopped; 5 delivered/);
    assert.equal((await recording.store.statistics()).inFlight, 0);
  });
});
