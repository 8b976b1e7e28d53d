/**
 * The admin commands as a user runs them, through the built bin against real Postgres: `setup`
 * into a fresh schema, `stats --json` compared with the database, `dead list` and `dead requeue`
 * moving dead letters back, `purge` with retention, and `sql` printing the DDL.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { lines, runCli, startCli, useBuiltCli } from './support.js';
import * as owners from '../support/claims.js';

const found = await findPostgres();
useBuiltCli();

describe('relaybus setup, stats, dead, purge (real Postgres, built bin)', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const url = 'url' in found ? found.url : '';
  const schema = uniqueSchemaName('cli_admin');
  const flags = ['--database-url', url, '--schema', schema];
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;

  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 2 });
    store = postgresStore({ driver: fromPg(pool), schema });
  });
  after(async () => {
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });

  /** Publish `count` events for `handlers`, each with one attempt; bury the first `dead` deliveries of `handlers[0]`. */
  async function seed(count: number, handlers: readonly string[], dead: number, availableAt?: Date): Promise<string[]> {
    const published = await store.transaction((tx) =>
      store.publish(
        tx,
        Array.from({ length: count }, (_, i) => ({
          type: 'order.placed',
          key: `customer-${i % 3}`,
          payload: { n: i },
          handlers: handlers.map((name) => ({ name, maxAttempts: 1 })),
          ...(availableAt ? { availableAt } : {}),
        })),
      ),
    );
    if (dead > 0) {
      const claimed = await owners.claim(store, {
        owner: 'cli-test',
        handlers: [handlers[0]!],
        limit: dead,
        leaseDurationMs: 30_000,
      });
      for (const delivery of claimed)
        assert.ok(
          await store.bury(
            { deliveryId: delivery.id, leaseToken: delivery.leaseToken },
            { error: `boom ${delivery.id}\nsecond line` },
          ),
        );
      await owners.relinquish(store, 'cli-test');
    }
    return published.map((result) => result.eventId);
  }

  it('setup creates the tables in a fresh schema, and is idempotent', { timeout: 30_000 }, async () => {
    for (let run = 0; run < 2; run += 1) {
      const result = await runCli(['setup', ...flags]);
      assert.equal(result.code, 0, result.stderr);
      assert.match(result.stdout, new RegExp(`^relaybus: schema "${schema}" on .+ is set up \\(\\d+ ms\\)\\n$`));
    }
    const { rows } = await pool.query<{ count: number }>(
      'SELECT count(*)::int AS count FROM information_schema.tables WHERE table_schema = $1',
      [schema],
    );
    assert.ok(rows[0]!.count >= 5);
  });

  it('stats --json parses and matches the database', { timeout: 30_000 }, async () => {
    await seed(7, ['email', 'ledger'], 2);
    await seed(3, ['email'], 0, new Date(Date.now() + 3_600_000)); // scheduled for later
    const result = await runCli(['stats', '--json', ...flags]);
    assert.equal(result.code, 0, result.stderr);
    const json = JSON.parse(result.stdout) as {
      schema: string;
      handlers: Record<string, Record<string, number | null>>;
    } & Record<string, unknown>;
    const expected = await store.statistics();
    assert.equal(json.schema, schema);
    const { rows } = await pool.query<{ handler: string; pending: number; dead: number; due: number }>(
      `SELECT handler, count(*) FILTER (WHERE status = 'pending')::int AS pending, count(*) FILTER (WHERE status = 'dead')::int AS dead,
              count(*) FILTER (WHERE status = 'pending' AND available_at <= now())::int AS due
       FROM "${schema}".relaybus_deliveries GROUP BY handler ORDER BY handler`,
    );
    assert.deepEqual(rows, [
      { handler: 'email', pending: 8, dead: 2, due: 5 },
      { handler: 'ledger', pending: 7, dead: 0, due: 7 },
    ]);
    for (const row of rows) {
      const stats = json.handlers[row.handler]!;
      assert.deepEqual(
        { pending: stats.pending, due: stats.due, dead: stats.dead, inFlight: stats.inFlight },
        { pending: row.pending, due: row.due, dead: row.dead, inFlight: 0 },
      );
      assert.equal(typeof stats.oldestDueAgeMs, 'number');
    }
    assert.equal(json.handlers.email!.scheduled, 3);
    for (const key of ['pending', 'due', 'scheduled', 'inFlight', 'dead', 'lanesLeased'] as const) {
      assert.equal(json[key], expected[key], key);
    }
    assert.equal(json.completed, null, 'no completion history is recorded');
  });

  it('stats prints an aligned table with a total row', { timeout: 30_000 }, async () => {
    const result = await runCli(['stats', ...flags]);
    assert.equal(result.code, 0, result.stderr);
    const out = lines(result.stdout);
    assert.match(out[0]!, new RegExp(`^relaybus stats  schema "${schema}" on .+ lanes leased: 0$`));
    const table = out.slice(2);
    assert.match(table[0]!, /^HANDLER\s+PENDING\s+DUE\s+SCHEDULED\s+IN FLIGHT\s+DEAD\s+OLDEST DUE$/);
    assert.match(table[1]!, /^email\s+8\s+5\s+3\s+0\s+2\s+\S+$/);
    assert.match(table[2]!, /^ledger\s+7\s+7\s+0\s+0\s+0\s+\S+$/);
    assert.match(table[3]!, /^total\s+15\s+12\s+3\s+0\s+2\s+\S+$/);
    assert.equal(
      new Set(table.map((line) => line.length)).size,
      1,
      'the last column is right-aligned: every line ends at the same column',
    );
    const header = table[0]!;
    for (const name of ['PENDING', 'DUE', 'SCHEDULED', 'IN FLIGHT', 'DEAD', 'OLDEST DUE']) {
      const end = header.indexOf(name) + name.length;
      for (const row of table.slice(1)) {
        assert.notEqual(row[end - 1], ' ', `${name} is right-aligned in ${JSON.stringify(row)}`);
        assert.ok(
          row[end] === undefined || row[end] === ' ',
          `${name} ends at its header's end in ${JSON.stringify(row)}`,
        );
      }
    }
  });

  it('stats --watch refreshes until SIGINT (one JSON line per refresh in a pipe), then exits 0', {
    timeout: 30_000,
  }, async () => {
    const watch = startCli(['stats', '--watch', '100ms', '--json', ...flags]);
    await watch.waitFor(/(\{.*\}\n){3}/s);
    watch.child.kill('SIGINT');
    const result = await watch.exited;
    assert.equal(result.code, 0, result.stderr);
    const snapshots = lines(result.stdout).map((line) => JSON.parse(line) as { pending: number; at: string });
    assert.ok(snapshots.length >= 3);
    assert.ok(snapshots.every((snapshot) => snapshot.pending === 15));
    assert.notEqual(snapshots[0]!.at, snapshots[2]!.at);
  });

  it('dead list shows the dead letters (table and --json), filtered by handler', { timeout: 30_000 }, async () => {
    const json = await runCli(['dead', 'list', '--json', ...flags]);
    assert.equal(json.code, 0, json.stderr);
    const dead = JSON.parse(json.stdout) as {
      id: string;
      handler: string;
      status: string;
      attempts: number;
      lastError: string;
    }[];
    assert.equal(dead.length, 2);
    for (const item of dead) {
      assert.equal(item.handler, 'email');
      assert.equal(item.status, 'dead');
      assert.equal(item.attempts, 1);
      assert.equal(item.lastError, `boom ${item.id}\nsecond line`);
    }
    const table = await runCli(['dead', 'list', ...flags]);
    assert.equal(table.code, 0, table.stderr);
    const out = lines(table.stdout);
    assert.match(out[0]!, /^\s*ID\s+HANDLER\s+EVENT\s+EVENT ID\s+KEY\s+ATTEMPTS\s+DIED\s+LAST ERROR$/);
    assert.match(
      out[1]!,
      new RegExp(
        `^\\s*${dead[0]!.id}\\s+email\\s+order\\.placed\\s+\\S+\\s+customer-\\d\\s+1/1\\s+\\S+ ago\\s+boom ${dead[0]!.id} second line$`,
      ),
    );
    assert.equal(
      out.at(-1),
      '2 dead deliveries; requeue with: relaybus dead requeue --id <id> | --handler <name> | --event-id <id> | --all',
    );
    const none = await runCli(['dead', 'list', '--handler', 'ledger', ...flags]);
    assert.equal(none.stdout, `no dead deliveries in schema "${schema}" matching the filters\n`);
    const limited = JSON.parse(
      (await runCli(['dead', 'list', '--json', '--limit', '1', ...flags])).stdout,
    ) as unknown[];
    assert.equal(limited.length, 1);
  });

  it('dead requeue moves dead letters back to pending (by id, by handler, needs a selector); an --id that is not dead exits 1', {
    timeout: 30_000,
  }, async () => {
    const [first, second] = (
      JSON.parse((await runCli(['dead', 'list', '--json', ...flags])).stdout) as { id: string }[]
    ).map((d) => d.id);
    const missing = await runCli(['dead', 'requeue', ...flags]);
    assert.equal(missing.code, 2);
    assert.equal(
      missing.stderr,
      'relaybus: dead requeue needs a selector: --id <delivery-id>, --handler <name>, --event-id <id>, or --all\n',
    );

    const byId = await runCli(['dead', 'requeue', '--id', first!, '--json', ...flags]);
    assert.equal(byId.code, 0, byId.stderr);
    assert.deepEqual(JSON.parse(byId.stdout), { requeued: 1 });
    const row = await pool.query<{ status: string; attempts: number }>(
      `SELECT status, attempts FROM "${schema}".relaybus_deliveries WHERE id = $1`,
      [first],
    );
    assert.deepEqual(row.rows[0], { status: 'pending', attempts: 0 });

    // An --id that names no dead delivery (requeued already, or never there) fails, saying so.
    for (const id of [first!, '999999']) {
      const notDead = await runCli(['dead', 'requeue', '--id', id, ...flags]);
      assert.equal(notDead.code, 1, `--id ${id}: ${notDead.stdout}`);
      assert.equal(notDead.stdout, '');
      assert.match(
        notDead.stderr,
        new RegExp(
          `^relaybus: no dead delivery with id ${id} in schema "${schema}": the delivery does not exist, completed, or is not dead .*relaybus dead list shows the dead ones\n$`,
        ),
      );
    }

    const byHandler = await runCli(['dead', 'requeue', '--handler', 'email', ...flags]);
    assert.equal(byHandler.code, 0, byHandler.stderr);
    assert.match(byHandler.stdout, /^requeued 1 dead delivery: pending again with a fresh attempt budget/);
    const again = await runCli(['dead', 'requeue', '--all', ...flags]);
    assert.equal(again.stdout, 'no dead delivery matched; nothing requeued\n');
    const stats = await store.statistics();
    assert.equal(stats.dead, 0);
    assert.equal(stats.handlers.email!.pending, 10);
    assert.ok(second);
  });

  it('purge deletes dead letters past the retention; bad durations are usage errors', { timeout: 30_000 }, async () => {
    await seed(2, ['audit'], 2);
    const kept = await runCli(['purge', '--json', ...flags]);
    assert.equal(kept.code, 0, kept.stderr);
    assert.deepEqual(JSON.parse(kept.stdout), {
      events: 0,
      deadDeliveries: 0,
      history: 0,
      completedRetentionMs: 7 * 86_400_000,
      deadRetentionMs: 30 * 86_400_000,
    });
    const purged = await runCli(['purge', '--dead-retention', '0', '--completed-retention', '1h', ...flags]);
    assert.equal(purged.code, 0, purged.stderr);
    assert.equal(
      purged.stdout,
      `purged from schema "${schema}": 0 events, 2 dead deliveries, 0 completion-history rows (completed retention 1h, dead retention 0ms)\n`,
    );
    assert.equal((await store.statistics()).dead, 0);
    const bad = await runCli(['purge', '--dead-retention', 'soon', ...flags]);
    assert.equal(bad.code, 2);
    assert.equal(
      bad.stderr,
      'relaybus: --dead-retention must be a duration such as 500ms, 30s, 12h or 7d (or plain milliseconds), got "soon"\n',
    );
  });

  it('a schema without tables says to run setup; an unreachable database fails with one line', {
    timeout: 30_000,
  }, async () => {
    const empty = await runCli(['stats', '--database-url', url, '--schema', `${schema}_none`]);
    assert.equal(empty.code, 1);
    assert.equal(lines(empty.stderr).length, 1);
    assert.match(
      empty.stderr,
      new RegExp(
        `^relaybus: The relaybus tables are missing in schema "${schema}_none" .*Run .npx relaybus setup --schema ${schema}_none..*\\n$`,
      ),
    );
    const down = await runCli(['stats', '--database-url', 'postgres://postgres@127.0.0.1:1/none']);
    assert.equal(down.code, 1);
    assert.equal(lines(down.stderr).length, 1);
    assert.match(down.stderr, /^relaybus: Postgres statement "statistics" failed: .*ECONNREFUSED/);
  });
});

describe('relaybus sql (no database)', () => {
  it('prints the whole DDL for a schema, only the supplement with --supplement, the adopt migration with --adopt', {
    timeout: 30_000,
  }, async () => {
    const full = await runCli(['sql', '--schema', 'events']);
    assert.equal(full.code, 0, full.stderr);
    assert.match(full.stdout, /^-- relaybus schema "events"/);
    assert.match(full.stdout, /CREATE SCHEMA IF NOT EXISTS "events"/);
    assert.match(full.stdout, /CREATE TABLE "events"\."relaybus_deliveries"/);
    assert.match(full.stdout, /INSERT INTO "events"\.relaybus_migrations/);
    const supplement = await runCli(['sql', '--supplement']);
    assert.equal(supplement.code, 0, supplement.stderr);
    assert.doesNotMatch(supplement.stdout, /CREATE TABLE/);
    assert.match(
      supplement.stdout,
      /ALTER TABLE "relaybus"\."relaybus_lanes" SET \(fillfactor = 50, toast_tuple_target = 8160\);\n--> statement-breakpoint\n/,
    );
    const adopt = await runCli(['sql', '--adopt', '--schema', 'events']);
    assert.equal(adopt.code, 0, adopt.stderr);
    assert.match(adopt.stdout, /ALTER SCHEMA "events" RENAME TO "relaybus_set_aside_[0-9a-f]{12}"/);
    assert.doesNotMatch(adopt.stdout, /CREATE TABLE/);
    const both = await runCli(['sql', '--adopt', '--supplement']);
    assert.equal(both.code, 2);
    assert.match(both.stderr, /--adopt and --supplement print two different migrations/);
    const bad = await runCli(['sql', '--schema', 'Bad Name']);
    assert.equal(bad.code, 2);
    assert.equal(lines(bad.stderr).length, 1);
  });
});
