import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { StoreUnavailableError, SchemaMismatchError } from '../../src/core/errors.js';
import type { LogFields, Logger, LogLevel } from '../../src/core/logger.js';
import { UsageError, type OutputStream } from '../../src/cli/command.js';
import {
  checkDatabaseUrl,
  describeDatabaseUrl,
  isConnectionString,
  redactConnectionString,
} from '../../src/cli/database-url.js';
import { createCliLogger, type LogFormat } from '../../src/cli/log.js';
import { watchParent } from '../../src/cli/parent-watch.js';
import { startWithRetry } from '../../src/cli/start-retry.js';
import { RetryBackoff, STORE_RETRY_BACKOFF } from '../../src/core/retry-backoff.js';
import { waitFor } from '../support/wait.js';

/** The pure parts of `relaybus worker`: its logger, the DATABASE_URL checks, the parent watch and the start retries. */

function capture(): OutputStream & { text: string } {
  const stream = {
    text: '',
    write(chunk: string) {
      stream.text += chunk;
      return true;
    },
  };
  return stream;
}

function logger(level: LogLevel, format: LogFormat) {
  const stdout = capture();
  const stderr = capture();
  const log = createCliLogger({
    level,
    format,
    stdout,
    stderr,
    prefix: 'relaybus worker',
    now: () => new Date('2030-01-02T03:04:05.678Z'),
  });
  return { log, stdout, stderr };
}

describe('worker logger', () => {
  it('json: one object per line with time, level, msg and the fields; info on stdout, warn and error on stderr', () => {
    const { log, stdout, stderr } = logger('debug', 'json');
    log.info('dispatcher started', { owner: 'w:1:ab', handlers: 2, ownerPrefix: undefined });
    log.warn('database unreachable', {
      attempt: 1,
      error: new Error('connect ECONNREFUSED'),
      msg: 'a field named msg',
      big: 5n,
    });
    log.error('multi\nline', { nested: { a: [1, 2] } });
    log.debug('claimed deliveries', { count: 3 });
    const out = stdout.text
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    const err = stderr.text
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    assert.deepEqual(out, [
      { time: '2030-01-02T03:04:05.678Z', level: 'info', msg: 'dispatcher started', owner: 'w:1:ab', handlers: 2 },
      { time: '2030-01-02T03:04:05.678Z', level: 'debug', msg: 'claimed deliveries', count: 3 },
    ]);
    assert.deepEqual(err, [
      {
        time: '2030-01-02T03:04:05.678Z',
        level: 'warn',
        msg: 'database unreachable',
        attempt: 1,
        error: 'Error: connect ECONNREFUSED',
        field_msg: 'a field named msg',
        big: '5',
      },
      { time: '2030-01-02T03:04:05.678Z', level: 'error', msg: 'multi\nline', nested: { a: [1, 2] } },
    ]);
    assert.equal(Object.keys(out[0]!).slice(0, 3).join(), 'time,level,msg', 'time, level and msg come first');
  });

  it('json survives a field with a cycle', () => {
    const { log, stdout } = logger('info', 'json');
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    log.info('odd', { cyclic, n: 1 });
    assert.deepEqual(JSON.parse(stdout.text), {
      time: '2030-01-02T03:04:05.678Z',
      level: 'info',
      msg: 'odd',
      cyclic: '[object Object]',
      n: 1,
    });
  });

  it('pretty: prefix, message and key=value fields on one line, quoted where needed', () => {
    const { log, stdout, stderr } = logger('info', 'pretty');
    log.info('dispatcher stopped', { owner: 'w:1:ab', drained: true, lanesRelinquished: 3 });
    log.warn('database unreachable', {
      attempt: 2,
      error: 'StoreUnavailableError: connect ECONNREFUSED 127.0.0.1:5999',
      at: new Date('2030-01-01T00:00:00Z'),
    });
    assert.equal(stdout.text, 'relaybus worker: dispatcher stopped owner=w:1:ab drained=true lanesRelinquished=3\n');
    assert.equal(
      stderr.text,
      'relaybus worker: database unreachable attempt=2 error="StoreUnavailableError: connect ECONNREFUSED 127.0.0.1:5999" at=2030-01-01T00:00:00.000Z\n',
    );
  });

  it('drops lines below the level', () => {
    const { log, stdout, stderr } = logger('warn', 'pretty');
    log.debug('d');
    log.info('i');
    log.warn('w');
    log.error('e');
    assert.equal(stdout.text, '');
    assert.equal(stderr.text, 'relaybus worker: w\nrelaybus worker: e\n');
  });
});

describe('DATABASE_URL', () => {
  it('accepts URLs with a scheme and socket paths; refuses the rest with a usage error that does not echo the value', () => {
    for (const ok of [
      'postgres://u:p@db:5432/app',
      'postgresql://localhost/app?sslmode=require',
      'postgres:///app?host=/var/run/postgresql',
      '/var/run/postgresql',
    ]) {
      assert.equal(isConnectionString(ok), true, ok);
    }
    for (const bad of ['not-a-url', 'localhost:5432', 'db/app', 'postgres//x'])
      assert.equal(isConnectionString(bad), false, bad);
    assert.doesNotThrow(() => checkDatabaseUrl({}));
    assert.doesNotThrow(() => checkDatabaseUrl({ DATABASE_URL: 'postgres://x/y' }));
    assert.throws(
      () => checkDatabaseUrl({ DATABASE_URL: 'not-a-url-secret' }),
      (error: unknown) =>
        error instanceof UsageError &&
        /^DATABASE_URL is not a valid connection string/.test(error.message) &&
        !error.message.includes('secret'),
    );
  });

  it('is described without its password', () => {
    assert.equal(
      redactConnectionString('postgres://app:s3cret@db.internal:5432/orders'),
      'postgres://app:***@db.internal:5432/orders',
    );
    assert.equal(
      redactConnectionString('postgres://db/orders?password=s3cret&sslmode=require'),
      'postgres://db/orders?password=***&sslmode=require',
    );
    assert.equal(
      redactConnectionString('postgres://postgres@127.0.0.1:5432/test'),
      'postgres://postgres@127.0.0.1:5432/test',
    );
    assert.equal(describeDatabaseUrl({}), undefined);
    assert.equal(describeDatabaseUrl({ DATABASE_URL: '' }), undefined);
  });
});

describe('watchParent', () => {
  it('calls back once when the parent process id changes', async () => {
    let ppid = 100;
    const seen: [number, number][] = [];
    const stop = watchParent((was, now) => seen.push([was, now]), { intervalMs: 5, ppid: () => ppid });
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.deepEqual(seen, []);
    ppid = 1;
    await waitFor(() => seen.length > 0, 'the change is seen');
    ppid = 7;
    await new Promise((resolve) => setTimeout(resolve, 30));
    assert.deepEqual(seen, [[100, 1]]);
    stop();
  });
});

describe('startWithRetry', () => {
  const recording = () => {
    const lines: { level: LogLevel; message: string; fields: LogFields }[] = [];
    const at =
      (level: LogLevel) =>
      (message: string, fields: LogFields = {}) => {
        lines.push({ level, message, fields });
      };
    const log: Logger = { debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
    return { log, lines };
  };
  const fast = () => new RetryBackoff({ ...STORE_RETRY_BACKOFF, initialDelayMs: 5, maxDelayMs: 20, jitter: 0 });

  it('retries errors a retry can fix, one warn line per attempt with the next retry time, then says the database is back', async () => {
    const { log, lines } = recording();
    let calls = 0;
    const result = await startWithRetry({
      start: async () => {
        if (++calls <= 3) throw new StoreUnavailableError('the database system is shutting down', { retryable: true });
      },
      logger: log,
      signal: new AbortController().signal,
      backoff: fast(),
      fields: { hint: 'DATABASE_URL is not set' },
    });
    assert.equal(result, 'started');
    assert.equal(calls, 4);
    assert.deepEqual(
      lines.map((line) => `${line.level} ${line.message}`),
      [
        'warn database unreachable; starting again after a backoff',
        'warn database still unreachable; starting again after a backoff',
        'warn database still unreachable; starting again after a backoff',
        'info database reachable again; the store is set up',
      ],
    );
    assert.deepEqual(
      lines.slice(0, 3).map((line) => [line.fields.attempt, line.fields.retryInMs, line.fields.hint]),
      [
        [1, 5, 'DATABASE_URL is not set'],
        [2, 10, 'DATABASE_URL is not set'],
        [3, 20, 'DATABASE_URL is not set'],
      ],
    );
    assert.ok(!Number.isNaN(Date.parse(String(lines[0]!.fields.retryAt))));
  });

  it('rejects at once with an error a retry cannot fix', async () => {
    const { log, lines } = recording();
    let calls = 0;
    await assert.rejects(
      startWithRetry({
        start: async () => {
          calls += 1;
          throw new SchemaMismatchError('the relaybus schema is newer than this code');
        },
        logger: log,
        signal: new AbortController().signal,
        backoff: fast(),
      }),
      SchemaMismatchError,
    );
    assert.equal(calls, 1);
    assert.deepEqual(lines, []);
  });

  it('stops retrying when the worker is asked to stop', async () => {
    const { log } = recording();
    const stop = new AbortController();
    let calls = 0;
    const started = Date.now();
    const result = startWithRetry({
      start: async () => {
        calls += 1;
        throw new StoreUnavailableError('down', { retryable: true });
      },
      logger: log,
      signal: stop.signal,
      backoff: new RetryBackoff({ ...STORE_RETRY_BACKOFF, initialDelayMs: 10_000, maxDelayMs: 10_000 }),
    });
    setTimeout(() => stop.abort(), 20);
    assert.equal(await result, 'stopped');
    assert.equal(calls, 1);
    assert.ok(Date.now() - started < 1_000);
  });
});
