/**
 * `relaybus worker --metrics-port` as a user runs it (built bin, real Postgres behind a TCP proxy):
 * `/metrics` scraped during a drain shows the completed counter moving and the backlog shrinking to
 * 0; `/readyz` turns 503 while Postgres is unreachable and 200 again when it is back, while
 * `/healthz` stays 200; a metrics port in use is a clear error and the worker keeps delivering; bad
 * flags are usage errors.
 */
import assert from 'node:assert/strict';
import { createServer, type AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { parseSamples, sampleValue } from '../telemetry/prom-text.js';
import { TcpProxy } from '../support/tcp-proxy.js';
import { IMPORTS, runCli, startCli, tempDir, useBuiltCli, writeModule } from './support.js';

const found = await findPostgres();
useBuiltCli();

const CONFIG = `
import pg from '${IMPORTS.pg}';
import { createRelayBus, defineEvent, Type } from '${IMPORTS.relaybus}';
import { fromPg, postgresStore } from '${IMPORTS.postgres}';

const schema = process.env.TEST_SCHEMA;
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 4, connectionTimeoutMillis: 2_000 });
pool.on('error', () => {});
const store = postgresStore({ driver: fromPg(pool, { closeWithStore: true }), schema });
const OrderPlaced = defineEvent('order.placed', Type.Object({ n: Type.Integer() }));
const bus = createRelayBus({ store, events: [OrderPlaced], dispatcher: { concurrency: 2, batchSize: 2, pollIntervalMs: 50 } });
const delayMs = Number(process.env.HANDLER_DELAY_MS ?? 0);
bus.on(OrderPlaced, 'record', async (payload, ctx) => {
  if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  await pool.query('INSERT INTO "' + schema + '".handled (delivery_id, n) VALUES ($1, $2)', [ctx.delivery.id, payload.n]);
});
export default bus;
`;

async function get(url: string): Promise<{ status: number; body: string }> {
  const response = await fetch(url);
  return { status: response.status, body: await response.text() };
}

async function until<T>(what: string, probe: () => Promise<T | undefined>, timeoutMs = 20_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe().catch(() => undefined);
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting until ${what}`);
    await sleep(50);
  }
}

describe('relaybus worker --metrics-port (real Postgres, built bin)', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const url = 'url' in found ? found.url : '';
  const schema = uniqueSchemaName('cli_metrics');
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  let config: string;
  const env = (databaseUrl = url) => ({ DATABASE_URL: databaseUrl, TEST_SCHEMA: schema });

  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 2 });
    store = postgresStore({ driver: fromPg(pool), schema });
    await store.setup();
    await pool.query(`CREATE TABLE "${schema}".handled (delivery_id bigint NOT NULL, n int NOT NULL)`);
    config = writeModule(tempDir('metrics'), 'bus.mjs', CONFIG);
  });
  after(async () => {
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });

  async function publish(count: number): Promise<void> {
    await store.transaction((tx) =>
      store.publish(
        tx,
        Array.from({ length: count }, (_, n) => ({
          type: 'order.placed',
          payload: { n },
          handlers: [{ name: 'record', maxAttempts: 3 }],
        })),
      ),
    );
  }

  it('/metrics moves during a drain and the backlog reaches 0; /readyz follows Postgres going away and coming back', {
    timeout: 60_000,
  }, async () => {
    const total = 150;
    await publish(total);
    const target = new URL(url);
    const proxy = await TcpProxy.create({ host: target.hostname, port: Number(target.port || 5432) });
    await proxy.open();
    const worker = startCli(['worker', config, '--metrics-port', '0', '--metrics-interval', '100ms'], {
      env: { ...env(proxy.urlFor(url)), HANDLER_DELAY_MS: '20' },
    });
    try {
      await worker.waitFor(/metrics on http:\/\/127\.0\.0\.1:\d+\/metrics/);
      const base = /metrics on (http:\/\/127\.0\.0\.1:\d+)\/metrics/.exec(worker.output().stdout)![1]!;

      const completedSeen: number[] = [];
      const dueSeen: number[] = [];
      const final = await until(
        'the drain is over and sampled',
        async () => {
          const { status, body } = await get(`${base}/metrics`);
          assert.equal(status, 200);
          const samples = parseSamples(body);
          const completed =
            sampleValue(samples, 'relaybus_deliveries_total', { handler: 'record', outcome: 'completed' }) ?? 0;
          const due = sampleValue(samples, 'relaybus_backlog_due', { handler: 'record' });
          const pending = sampleValue(samples, 'relaybus_backlog_pending', { handler: 'record' });
          completedSeen.push(completed);
          if (due !== undefined) dueSeen.push(due);
          return completed === total && due === 0 && pending === 0 ? samples : undefined;
        },
        30_000,
      );

      assert.deepEqual(
        completedSeen,
        [...completedSeen].sort((a, b) => a - b),
        'the completed counter never goes down',
      );
      assert.ok(
        new Set(completedSeen.filter((n) => n > 0 && n < total)).size >= 3,
        `the counter was seen moving mid-drain: ${completedSeen.join(',')}`,
      );
      assert.ok(Math.max(...dueSeen) > 0, 'a backlog was seen while draining');
      assert.equal(dueSeen.at(-1), 0, 'and it shrank to 0');
      assert.equal(
        sampleValue(final, 'relaybus_handler_duration_seconds_count', { handler: 'record', outcome: 'completed' }),
        total,
      );
      assert.ok((sampleValue(final, 'relaybus_claim_size_sum') ?? 0) >= total, 'claims returned every delivery');
      assert.ok((sampleValue(final, 'relaybus_claim_duration_seconds_count', { result: 'ok' }) ?? 0) > 0);
      assert.equal(sampleValue(final, 'relaybus_ready'), 1);
      const handled = await pool.query<{ count: number }>(
        `SELECT count(DISTINCT delivery_id)::int AS count FROM "${schema}".handled`,
      );
      assert.equal(handled.rows[0]!.count, total);

      assert.equal((await get(`${base}/healthz`)).status, 200);
      assert.equal((await get(`${base}/readyz`)).status, 200);
      assert.equal((await get(`${base}/nope`)).status, 404);

      await proxy.cut();
      const down = await until('/readyz says unready', async () => {
        const answer = await get(`${base}/readyz`);
        return answer.status === 503 ? answer : undefined;
      });
      const body = JSON.parse(down.body) as { ready: boolean; health?: { lastError?: string } };
      assert.equal(body.ready, false);
      assert.ok(body.health?.lastError, 'the body says why');
      assert.equal((await get(`${base}/healthz`)).status, 200, 'still alive while the database is away');
      assert.equal(
        sampleValue(parseSamples((await get(`${base}/metrics`)).body), 'relaybus_ready'),
        0,
        '/metrics still answers, ready 0',
      );

      await proxy.open();
      await until(
        '/readyz says ready again',
        async () => ((await get(`${base}/readyz`)).status === 200 ? true : undefined),
        40_000,
      );
      await publish(5);
      await until('deliveries run again', async () => {
        const samples = parseSamples((await get(`${base}/metrics`)).body);
        return sampleValue(samples, 'relaybus_deliveries_total', { handler: 'record', outcome: 'completed' }) ===
          total + 5
          ? true
          : undefined;
      });
    } finally {
      worker.child.kill('SIGTERM');
      const result = await worker.exited;
      await proxy.cut();
      assert.equal(result.code, 0, result.stderr);
    }
  });

  it('a metrics port in use is one clear error line, and the worker still drains', { timeout: 30_000 }, async () => {
    await pool.query(`TRUNCATE "${schema}".handled`);
    await publish(20);
    const busy = createServer();
    await new Promise<void>((resolve) => busy.listen(0, '127.0.0.1', resolve));
    const { port } = busy.address() as AddressInfo;
    try {
      const result = await runCli(['worker', config, '--once', '--metrics-port', String(port)], { env: env() });
      assert.equal(result.code, 0, result.stderr);
      assert.match(
        result.stderr,
        new RegExp(
          `metrics server cannot listen on 127\\.0\\.0\\.1:${port}: the port is in use .*The worker keeps delivering`,
        ),
      );
      assert.equal(result.stderr.trim().split('\n').length, 1, `one line: ${result.stderr}`);
      const handled = await pool.query<{ count: number }>(`SELECT count(*)::int AS count FROM "${schema}".handled`);
      assert.equal(handled.rows[0]!.count, 20);
    } finally {
      busy.close();
    }
  });

  it('bad metrics flags are usage errors (exit 2)', { timeout: 30_000 }, async () => {
    const outOfRange = await runCli(['worker', config, '--metrics-port', '70000'], { env: env() });
    assert.equal(outOfRange.code, 2);
    assert.match(outOfRange.stderr, /--metrics-port must be an integer from 0 to 65535, got "70000"/);
    const hostAlone = await runCli(['worker', config, '--metrics-host', '0.0.0.0'], { env: env() });
    assert.equal(hostAlone.code, 2);
    assert.match(hostAlone.stderr, /--metrics-host and --metrics-interval go with --metrics-port/);
  });
});
