/**
 * The one classification of driver errors (`isRetryableDatabaseError`): SQLSTATEs, socket errors,
 * wrappers, and real errors of the drivers where they need no database (a refused connection).
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:net';
import { describe, it } from 'node:test';
import pg from 'pg';
import postgres from 'postgres';
import { InvalidInputError, StoreUnavailableError } from '../../src/core/errors.js';
import { isRetryableDatabaseError, sqlStateOf } from '../../src/postgres/retryable-errors.js';

const withCode = (code: string, message = 'failed'): Error => Object.assign(new Error(message), { code });

describe('isRetryableDatabaseError', () => {
  it('retries what a later attempt can get past', () => {
    for (const code of [
      '40001',
      '40P01',
      '55P03',
      '08006',
      '08003',
      '08001',
      '57P01',
      '57P02',
      '57P03',
      '53300',
      '53100',
      '58030',
      'XX000',
    ]) {
      assert.equal(isRetryableDatabaseError(withCode(code)), true, code);
    }
  });

  it('does not retry data, constraint, privilege, schema and statement errors', () => {
    const permanent = [
      '22021', // invalid byte sequence (a NUL in text)
      '22P05', // untranslatable character (\u0000 in jsonb)
      '22008', // datetime field overflow
      '23505',
      '23503',
      '23514', // unique, foreign key, check
      '42501', // insufficient privilege
      '42P01',
      '42703', // undefined table, column
      '25P02', // in a failed transaction: the caller must roll back
      '25006', // read-only transaction
      '57014', // statement_timeout
      '57P04', // database dropped
      '08P01', // protocol violation (a statement with the wrong number of parameters)
      '58P01', // undefined file
      'P0001', // raise_exception
    ];
    for (const code of permanent) assert.equal(isRetryableDatabaseError(withCode(code)), false, code);
  });

  it('retries dropped and refused connections by socket code or driver message', () => {
    for (const code of [
      'ECONNREFUSED',
      'ECONNRESET',
      'EPIPE',
      'ETIMEDOUT',
      'CONNECTION_CLOSED',
      'CONNECTION_ENDED',
      'CONNECT_TIMEOUT',
    ]) {
      assert.equal(isRetryableDatabaseError(withCode(code)), true, code);
    }
    assert.equal(isRetryableDatabaseError(new Error('Connection terminated unexpectedly')), true);
    assert.equal(isRetryableDatabaseError(new AggregateError([withCode('ECONNREFUSED')], 'connect failed')), true);
    assert.equal(isRetryableDatabaseError(new Error('syntax error at or near "SELEC"')), false);
    assert.equal(isRetryableDatabaseError(undefined), false);
    assert.equal(isRetryableDatabaseError('Connection terminated'), true);
  });

  it('classifies a wrapper by the driver error in its cause, and a RelayBusError by its own flag', () => {
    assert.equal(isRetryableDatabaseError(new Error('Failed query: ...', { cause: withCode('40P01') })), true);
    assert.equal(isRetryableDatabaseError(new Error('Failed query: ...', { cause: withCode('23505') })), false);
    assert.equal(isRetryableDatabaseError(new StoreUnavailableError('down', { retryable: true })), true);
    assert.equal(isRetryableDatabaseError(new InvalidInputError('bad')), false);
  });

  it('reads a SQLSTATE only from a five-character code', () => {
    assert.equal(sqlStateOf(withCode('23505')), '23505');
    assert.equal(sqlStateOf(withCode('ECONNREFUSED')), undefined);
    assert.equal(sqlStateOf(null), undefined);
  });

  it('retries the real errors pg and postgres.js raise for a refused and a dropped connection', async () => {
    // A port nothing listens on: take a free one, close it.
    const server = createServer();
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    const { port } = server.address() as { port: number };
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const client = new pg.Client({ host: '127.0.0.1', port, user: 'x', database: 'x', connectionTimeoutMillis: 2_000 });
    const pgError = await client.connect().then(
      () => undefined,
      (error: unknown) => error,
    );
    assert.ok(pgError, 'pg failed to connect');
    assert.equal(isRetryableDatabaseError(pgError), true, String(pgError));
    const sql = postgres({ host: '127.0.0.1', port, user: 'x', database: 'x', connect_timeout: 2, max: 1 });
    try {
      const pjError = await sql`select 1`.then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.ok(pjError, 'postgres.js failed to connect');
      assert.equal(isRetryableDatabaseError(pjError), true, String(pjError));
    } finally {
      await sql.end({ timeout: 0 });
    }
    // A server that accepts and hangs up at once: a connection dropped mid-handshake.
    const rude = createServer((socket) => socket.destroy());
    await new Promise<void>((resolve) => rude.listen(0, '127.0.0.1', resolve));
    try {
      const rudePort = (rude.address() as { port: number }).port;
      const dropped = new pg.Client({
        host: '127.0.0.1',
        port: rudePort,
        user: 'x',
        database: 'x',
        connectionTimeoutMillis: 2_000,
      });
      const droppedError = await dropped.connect().then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.ok(droppedError, 'pg failed on the dropped connection');
      assert.equal(isRetryableDatabaseError(droppedError), true, String(droppedError));
    } finally {
      await new Promise<void>((resolve) => rude.close(() => resolve()));
    }
  });
});
