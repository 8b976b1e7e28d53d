/**
 * `relaybus worker` when the database is not there, and in a container: the built bin keeps running
 * while nothing answers on its DATABASE_URL (logging each retry, as JSON here), drains once a proxy
 * starts forwarding to the real Postgres, and rides out an outage mid-run; it exits 1 with one line
 * on errors a retry cannot fix, 2 on a DATABASE_URL that is not a URL (before the config is even
 * imported); and it stops gracefully, handing its lanes back, both on a direct SIGTERM and when run
 * through `npm exec` whose npm process is signalled (npm exits and orphans the worker).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { findPostgres } from '../support/databases.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { isRunning, RECORDING_CONFIG, useRecordingSchema } from './recording-worker.js';
import { BIN, lines, REPO, runCli, startCli, tempDir, useBuiltCli, writeModule, type RunningCli } from './support.js';

const found = await findPostgres();
useBuiltCli();

describe('relaybus worker: database outages, bad settings, containers (real Postgres, built bin)', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const url = 'url' in found ? found.url : 'postgres://postgres@127.0.0.1:5432/test';
  const target = new URL(url);
  const recording = useRecordingSchema(url, 'cli_resilience');
  const { schema, leftovers, publish } = recording;
  const handled = recording.handledDeliveries;

  /** `url` with some parts replaced. */
  function urlWith(parts: { port?: number; database?: string; username?: string; password?: string }): string {
    const next = new URL(url);
    if (parts.port !== undefined) {
      next.hostname = '127.0.0.1';
      next.port = String(parts.port);
    }
    if (parts.database !== undefined) next.pathname = `/${parts.database}`;
    if (parts.username !== undefined) next.username = parts.username;
    if (parts.password !== undefined) next.password = parts.password;
    return next.toString();
  }

  async function reset(): Promise<void> {
    await recording.pool.query(
      `TRUNCATE "${schema}".handled, "${schema}".relaybus_deliveries, "${schema}".relaybus_events CASCADE`,
    );
  }

  async function lanesOf(owner: string): Promise<number> {
    const { rows } = await recording.pool.query<{ count: number }>(
      `SELECT count(*)::int AS count FROM "${schema}".relaybus_lanes WHERE lease_owner = $1`,
      [owner],
    );
    return rows[0]!.count;
  }

  async function waitUntil(what: string, check: () => Promise<boolean>, timeoutMs = 20_000): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
      await sleep(50);
    }
  }

  /** The lease owner the worker printed (`running ... as owner host:pid:random`) and its pid. */
  async function ownerOf(worker: RunningCli): Promise<{ owner: string; pid: number }> {
    await worker.waitFor(/ as owner \S+/);
    const owner = / as owner (\S+)/.exec(worker.output().stdout)![1]!;
    const pid = Number(owner.split(':').at(-2));
    leftovers.push(pid);
    return { owner, pid };
  }

  const env = (extra: Record<string, string | undefined> = {}) => ({
    DATABASE_URL: url,
    TEST_SCHEMA: schema,
    ...extra,
  });

  it('keeps running while the database is unreachable, logging each retry (JSON), drains once it answers, and rides out an outage', {
    timeout: 90_000,
  }, async () => {
    await reset();
    await publish(20);
    const proxy = await TcpProxy.create({ host: target.hostname, port: Number(target.port || 5432) });
    const worker = startCli(['worker', recording.config, '--log-format', 'json'], {
      env: env({ DATABASE_URL: urlWith({ port: proxy.port }) }),
    });
    try {
      await worker.waitFor(/"attempt":2/, 10_000); // two failed starts: 250 ms, then 500 ms of backoff
      assert.equal(worker.child.exitCode, null, 'still running');
      assert.equal(await handled(), 0);

      await proxy.open();
      await worker.waitFor(/database reachable again; the store is set up/);
      await waitUntil(
        'the backlog is drained and completed',
        async () => (await handled()) === 20 && (await recording.store.statistics()).pending === 0,
      );

      await proxy.cut(); // an outage while running: claims fail, the worker waits
      await worker.waitFor(/database unreachable; claiming again after a backoff/);
      await publish(10, { from: 20 });
      await sleep(300);
      assert.equal(worker.child.exitCode, null, 'still running through the outage');
      await proxy.open();
      await worker.waitFor(/database reachable again; claiming resumed/, 40_000);
      await waitUntil('what was published during the outage is drained', async () => (await handled()) === 30, 40_000);
    } finally {
      worker.child.kill('SIGTERM');
    }
    const result = await worker.exited;
    await proxy.cut();
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);

    const records = [...lines(result.stdout), ...lines(result.stderr)].map((line) => {
      const record = JSON.parse(line) as Record<string, unknown>; // every line is one JSON object
      assert.ok(
        !Number.isNaN(Date.parse(String(record.time))) &&
          typeof record.level === 'string' &&
          typeof record.msg === 'string',
        line,
      );
      return record;
    });
    const retries = records.filter((record) =>
      /^database (still )?unreachable; starting again/.test(String(record.msg)),
    );
    assert.ok(retries.length >= 2);
    retries.forEach((record, i) => {
      assert.equal(record.level, 'warn');
      assert.equal(record.attempt, i + 1, 'one line per failed attempt');
      assert.ok(
        Date.parse(String(record.retryAt)) > Date.parse(String(record.time)),
        'the next retry time is in the future',
      );
      assert.match(String(record.error), /ECONNREFUSED/);
    });
    const start = records.find((record) => String(record.msg).startsWith('starting 1 handler'));
    assert.match(String(start?.msg), new RegExp(`postgres store, schema ${schema}, DATABASE_URL postgres://`));
    assert.ok(
      records.some((record) => record.msg === 'dispatcher stopped' && typeof record.lanesRelinquished === 'number'),
      "the library's lines come through the same logger",
    );
    // A completion the server committed just as the outage cut its answer is written again and finds its delivery
    // gone: the worker looks it up and counts the run delivered ('completion confirmed'), not its lease lost.
    assert.deepEqual(
      records.filter((record) => record.detectedBy === 'outcome' && /^lease lost/.test(String(record.msg))),
      [],
      'no lease reported lost',
    );
    assert.match(
      String(
        lines(result.stdout)
          .map((line) => (JSON.parse(line) as { msg: string }).msg)
          .at(-1),
      ),
      /^stopped; 30 delivered, 0 failed attempts, 0 dead$/,
      // What the worker said about its deliveries, should one of them not end as delivered.
      records
        .filter((record) => /deliver|lease|complet|releas/.test(String(record.msg)))
        .map((record) => JSON.stringify(record))
        .join('\n'),
    );
    const claimRetries = records.filter((record) =>
      /^database (still )?unreachable; claiming again after a backoff$/.test(String(record.msg)),
    );
    assert.equal(claimRetries[0]?.level, 'warn', 'the outage mid-run is reported by the dispatcher');
    assert.equal(claimRetries[0]?.attempt, 1);
    assert.ok(
      records.some((record) => record.level === 'warn' && /connection failed while idle/.test(String(record.msg))),
      'dropped idle connections are reported (store.onConnectionError)',
    );
  });

  it('exits at once with one line on what a retry cannot fix; refuses a DATABASE_URL that is not a URL before importing the config', {
    timeout: 60_000,
  }, async () => {
    const mark = join(recording.dir, 'imported');
    const started = Date.now();
    const [database, role, unset, notUrl] = await Promise.all([
      runCli(['worker', recording.config, '--log-level', 'warn'], {
        env: env({ DATABASE_URL: urlWith({ database: 'relaybus_no_such_database' }) }),
      }),
      runCli(['worker', recording.config], {
        env: env({ DATABASE_URL: urlWith({ username: 'relaybus_no_such_role', password: 's3cret' }) }),
      }),
      runCli(['worker', recording.config], {
        env: env({
          DATABASE_URL: undefined,
          USER: undefined,
          PGUSER: undefined,
          PGPASSWORD: undefined,
          PGHOST: target.hostname,
          PGPORT: target.port || '5432',
        }),
      }),
      runCli(['worker', recording.config], { env: env({ DATABASE_URL: 'not-a-url', MARK_FILE: mark }) }),
    ]);
    assert.ok(Date.now() - started < 15_000, 'no retries');

    assert.equal(database.code, 1, database.stderr);
    assert.equal(database.stdout, '', '--log-level warn hides the info lines');
    assert.match(
      database.stderr,
      /^relaybus: the worker could not start: .*database "relaybus_no_such_database" does not exist\.?\n$/,
    );

    assert.equal(role.code, 1, role.stderr);
    assert.match(
      role.stderr,
      /^relaybus: the worker could not start: .*role "relaybus_no_such_role" does not exist\.?\n$/,
    );
    assert.match(
      role.stdout,
      /^relaybus worker: starting 1 handler \(record\) from bus\.mjs: postgres store, schema \S+, DATABASE_URL postgres:\/\/relaybus_no_such_role:\*\*\*@/m,
    );
    assert.doesNotMatch(role.stdout + role.stderr, /s3cret/, 'the password is never printed');

    assert.equal(unset.code, 1, unset.stderr);
    assert.match(unset.stdout, /DATABASE_URL is not set$/m);
    assert.match(
      unset.stderr,
      /^relaybus: DATABASE_URL is not set, and the store could not connect without it: .*no PostgreSQL user name specified in startup packet\.?\n$/,
    );

    assert.equal(notUrl.code, 2, notUrl.stderr);
    assert.equal(notUrl.stdout, '');
    assert.equal(
      notUrl.stderr,
      'relaybus: DATABASE_URL is not a valid connection string; expected postgres://user:password@host:5432/database\n',
    );
    assert.equal(existsSync(mark), false, 'the config module was not imported');
  });

  it('node <bin> worker: SIGTERM stops it gracefully (exit 0) and hands its lanes back at once', {
    timeout: 60_000,
  }, async () => {
    await reset();
    await publish(40);
    const worker = startCli(['worker', recording.config], { env: env({ HANDLER_DELAY_MS: '100' }) });
    const { owner } = await ownerOf(worker);
    await waitUntil('the worker holds lanes', async () => (await lanesOf(owner)) > 0);
    worker.child.kill('SIGTERM');
    const result = await worker.exited;
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
    assert.match(result.stdout, /SIGTERM received; stopping gracefully/);
    assert.equal(await lanesOf(owner), 0, 'every lane was relinquished, none waits out its lease');
  });

  it('npm exec relaybus -- worker: SIGTERM to npm (which exits and orphans the worker) still stops the worker gracefully, exit 129', {
    timeout: 60_000,
  }, async () => {
    await reset();
    await publish(40);
    // A project that depends on this package: node_modules/relaybus and its bin link, as npm install makes them.
    const project = tempDir('npm-exec');
    writeFileSync(
      join(project, 'package.json'),
      JSON.stringify({ name: 'app', private: true, type: 'module', dependencies: { relaybus: '*' } }),
    );
    mkdirSync(join(project, 'node_modules/.bin'), { recursive: true });
    symlinkSync(REPO, join(project, 'node_modules/relaybus'), 'dir');
    symlinkSync('../relaybus/dist/src/cli/main.js', join(project, 'node_modules/.bin/relaybus'));
    writeModule(project, 'bus.mjs', RECORDING_CONFIG);
    assert.ok(existsSync(BIN));

    const exitFile = join(project, 'worker.exit');
    const npm = spawn('npm', ['exec', '--offline', 'relaybus', '--', 'worker', 'bus.mjs'], {
      cwd: project,
      env: { ...process.env, ...env({ HANDLER_DELAY_MS: '100', EXIT_FILE: exitFile }) },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    npm.stdout.setEncoding('utf8').on('data', (chunk: string) => {
      stdout += chunk;
    });
    npm.stderr.setEncoding('utf8').on('data', (chunk: string) => {
      stderr += chunk;
    });
    // The pipes close when their last holder, the worker, exits: long after npm itself.
    const closed = new Promise<void>((resolve) => npm.on('close', () => resolve()));
    const npmExited = new Promise<void>((resolve) => npm.on('exit', () => resolve()));
    const deadline = Date.now() + 30_000;
    while (!/ as owner \S+/.test(stdout)) {
      if (Date.now() > deadline || npm.exitCode !== null)
        throw new Error(`the worker did not start under npm exec:\n${stdout}\n${stderr}`);
      await sleep(50);
    }
    const owner = / as owner (\S+)/.exec(stdout)![1]!;
    const pid = Number(owner.split(':').at(-2));
    leftovers.push(pid);
    assert.notEqual(pid, npm.pid, 'the worker is a grandchild of npm, not npm itself');
    await waitUntil('the worker holds lanes', async () => (await lanesOf(owner)) > 0);

    const signalledAt = Date.now();
    npm.kill('SIGTERM');
    await npmExited;
    const outcome = await Promise.race([
      closed.then(() => 'exited' as const),
      sleep(10_000).then(() => 'running' as const),
    ]);
    assert.equal(
      outcome,
      'exited',
      `the orphaned worker stopped within 10 s of npm being signalled\n${stdout}\n${stderr}`,
    );
    await waitUntil('the worker process is gone', async () => !isRunning(pid), 5_000);
    assert.ok(Date.now() - signalledAt < 15_000);
    assert.match(stdout, /stops when its parent process exits: npm \(pid \d+\) runs it through sh/);
    assert.match(stdout, /the parent process \(pid \d+\) exited .*; exit code 129\); stopping gracefully/);
    assert.match(stdout, /relaybus worker: stopped; \d+ delivered, 0 failed attempts, 0 dead/);
    assert.equal(readFileSync(exitFile, 'utf8'), '129', 'a worker its parent left exits non-zero');
    assert.equal(await lanesOf(owner), 0, 'every lane was relinquished');
    const stats = await recording.store.statistics();
    assert.equal(stats.inFlight, 0, 'nothing was left in flight');
  });
});
