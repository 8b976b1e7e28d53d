/**
 * What `relaybus worker` prints about a failed handler attempt: at the default level one stderr line
 * per attempt (the worker's own, with the retry time or the requeue command) and no stack; the stack
 * follows that line with --verbose (as --help says); the library's line about the same attempt only
 * at --log-level debug, without the stack.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { IMPORTS, lines, runCli, tempDir, useBuiltCli, writeModule } from './support.js';

const found = await findPostgres();
useBuiltCli();

/** `doomed` fails its only attempt; `flaky` fails its first of three, retried a minute later (after --once ended). */
const CONFIG = `
import pg from '${IMPORTS.pg}';
import { createRelayBus, defineEvent, Type } from '${IMPORTS.relaybus}';
import { fromPg, postgresStore } from '${IMPORTS.postgres}';

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4 });
const store = postgresStore({ driver: fromPg(pool, { closeWithStore: true }), schema: process.env.TEST_SCHEMA });
const OrderPlaced = defineEvent('order.placed', Type.Object({ n: Type.Integer() }));
const bus = createRelayBus({ store, events: [OrderPlaced], dispatcher: { pollIntervalMs: 50 } });
bus.on(OrderPlaced, 'doomed', { maxAttempts: 1 }, async () => {
  throw new Error('kaboom');
});
bus.on(OrderPlaced, 'flaky', { maxAttempts: 3, backoff: { initialDelayMs: 60_000, maxDelayMs: 60_000 } }, async () => {
  throw new Error('kaboom');
});
export default bus;
`;

const HANDLERS = [
  { name: 'doomed', maxAttempts: 1 },
  { name: 'flaky', maxAttempts: 3 },
];

describe('relaybus worker: log lines of failed attempts (real Postgres, built bin)', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const url = 'url' in found ? found.url : '';
  const schema = uniqueSchemaName('cli_logs');
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  let config = '';

  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 2 });
    store = postgresStore({ driver: fromPg(pool), schema });
    await store.setup();
    config = writeModule(tempDir('logs'), 'bus.mjs', CONFIG);
  });
  after(async () => {
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });

  /** One event for both handlers, then `relaybus worker --once` with `flags`. */
  async function failOnce(flags: readonly string[]): Promise<{ stdout: string; stderr: string }> {
    await pool.query(`TRUNCATE "${schema}".relaybus_deliveries, "${schema}".relaybus_events`);
    await store.transaction((tx) =>
      store.publish(tx, [{ type: 'order.placed', key: null, payload: { n: 1 }, handlers: HANDLERS }]),
    );
    const result = await runCli(['worker', config, '--once', ...flags], {
      env: { DATABASE_URL: url, TEST_SCHEMA: schema },
    });
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
    return result;
  }

  const FAILED = /^relaybus worker: flaky failed on delivery \d+ \(attempt 1\/3\), retry at \S+: Error: kaboom$/;
  const DEAD =
    /^relaybus worker: doomed failed its last attempt on delivery \d+ \(order\.placed \S+\); it is dead until requeued \(relaybus dead requeue --id \d+\): Error: kaboom$/;

  it('default level: one stderr line per failed attempt, no stack', { timeout: 60_000 }, async () => {
    const { stdout, stderr } = await failOnce([]);
    const errors = lines(stderr).sort();
    assert.equal(errors.length, 2, stderr);
    assert.match(errors[0]!, DEAD);
    assert.match(errors[1]!, FAILED);
    assert.doesNotMatch(`${stdout}${stderr}`, /stack=|\n\s+at /);
  });

  it('--verbose: the stack follows each line, indented', { timeout: 60_000 }, async () => {
    const { stderr } = await failOnce(['--verbose']);
    const headed = lines(stderr).filter((line) => line.startsWith('relaybus worker: '));
    assert.equal(headed.length, 2, stderr);
    assert.ok(headed.some((line) => FAILED.test(line)) && headed.some((line) => DEAD.test(line)), stderr);
    const frames = lines(stderr).filter((line) => /^ {4}at /.test(line));
    assert.ok(frames.length >= 2, `stack frames under the lines:\n${stderr}`);
    assert.ok(
      frames.some((line) => line.includes('bus.mjs')),
      'the handler is in the stack',
    );
  });

  it("--log-level debug: the library's line about the attempt too, on stdout and without the stack", {
    timeout: 60_000,
  }, async () => {
    const { stdout, stderr } = await failOnce(['--log-level', 'debug']);
    assert.equal(lines(stderr).length, 2, stderr);
    assert.match(stdout, /relaybus worker: handler failed; retrying later deliveryId=\d+ handler=flaky/);
    assert.doesNotMatch(stdout, /stack=|\n\s+at /);
  });
});
