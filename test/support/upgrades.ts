import { loadSupplement } from '../../src/postgres/schema-sql.js';
import assert from 'node:assert/strict';
import type pg from 'pg';
import { laneOf } from '../../src/core/lanes.js';
import type { Store } from '../../src/store/contract.js';
import { claim, relinquish } from './claims.js';

/**
 * What the schema tests share: the catalog of a schema (to compare installs built different ways),
 * deliveries written straight into a schema of any relaybus version, a drain through the store, and
 * the relaybus 0.1 layout (row leases) with thousands of deliveries in every 0.1 state.
 */

/**
 * The catalog of one relaybus schema, with the schema name replaced by S so two schemas compare:
 * tables with their storage parameters, columns (type, NOT NULL, default, identity, position),
 * constraints, indexes with their predicates and storage parameters, sequences, and the lane rows.
 * The schema drift test and the upgrade tests compare installs built different ways with it.
 */
export async function catalog(client: pg.Pool | pg.PoolClient, schema: string) {
  const q = async <Row extends object>(text: string): Promise<Row[]> => (await client.query<Row>(text, [schema])).rows;
  const neutral = (text: string | null) => (text ?? '').replaceAll(`"${schema}".`, 'S.').replaceAll(`${schema}.`, 'S.');
  const tables = await q<{ table: string; options: string[] | null; persistence: string }>(`
    SELECT c.relname AS table, c.reloptions AS options, c.relpersistence AS persistence
    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') ORDER BY 1`);
  const columns = await q<{
    table: string;
    column: string;
    type: string;
    not_null: boolean;
    default: string | null;
    identity: string;
    generated: string;
    position: number;
  }>(`
    SELECT c.relname AS table, a.attname AS column, format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull AS not_null,
           pg_get_expr(d.adbin, d.adrelid) AS default, a.attidentity AS identity, a.attgenerated AS generated, a.attnum AS position
    FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
    WHERE n.nspname = $1 AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped ORDER BY 1, a.attnum`);
  const constraints = await q<{ table: string; name: string; type: string; definition: string }>(`
    SELECT c.relname AS table, k.conname AS name, k.contype AS type, pg_get_constraintdef(k.oid) AS definition
    FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = $1 ORDER BY 1, 2`);
  const indexes = await q<{ name: string; definition: string; options: string[] | null }>(`
    SELECT i.indexname AS name, i.indexdef AS definition, c.reloptions AS options
    FROM pg_indexes i JOIN pg_namespace n ON n.nspname = i.schemaname JOIN pg_class c ON c.relname = i.indexname AND c.relnamespace = n.oid
    WHERE i.schemaname = $1 ORDER BY 1`);
  const sequences = await q<{ name: string; type: string; start: string; increment: string; cycle: boolean }>(`
    SELECT s.sequencename AS name, s.data_type::text AS type, s.start_value::text AS start, s.increment_by::text AS increment, s.cycle
    FROM pg_sequences s WHERE s.schemaname = $1 ORDER BY 1`);
  const functions = await q<{ name: string; definition: string }>(`
    SELECT p.proname AS name, pg_get_functiondef(p.oid) AS definition
    FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1 ORDER BY 1`);
  const lanes = await q<{ count: number; epochs: string; empty: boolean }>(`
    SELECT count(*)::int AS count, string_agg(DISTINCT epoch::text, ',') AS epochs, bool_and(in_flight = '{}' AND lease_owner IS NULL) AS empty
    FROM ${`"${schema}"`}.relaybus_lanes WHERE $1::text IS NOT NULL`);
  return {
    tables,
    columns: columns.map((c) => ({ ...c, default: neutral(c.default) })),
    constraints: constraints.map((c) => ({ ...c, definition: neutral(c.definition) })),
    indexes: indexes.map((i) => ({ ...i, definition: neutral(i.definition) })),
    sequences,
    functions: functions.map((f) => ({ ...f, definition: neutral(f.definition) })),
    lanes,
  };
}

/**
 * The supplement as relaybus `version` shipped it, for a schema built at that version: before 0002 it had no SQL
 * functions and no key-order sequence (the statements naming them came with 0002).
 */
export function supplementAtVersion(schema: string, version: string): string[] {
  const statements = loadSupplement(schema);
  if (version >= '0002') return statements;
  return statements.filter((statement) => !/FUNCTION|relaybus_key_order/.test(statement));
}

export type Catalog = Awaited<ReturnType<typeof catalog>>;

/**
 * The catalog without column positions (columns sorted by table and name): a schema upgraded in
 * place from relaybus 0.1 adds its new columns at the end, which changes nothing a statement sees.
 */
export function withoutPositions(value: Catalog) {
  return {
    ...value,
    columns: value.columns
      .map(({ position: _position, ...column }) => column)
      .sort((a, b) => a.table.localeCompare(b.table) || a.column.localeCompare(b.column)),
  };
}

/**
 * `count` events with one pending delivery each for handler `h`, written with plain SQL (so any
 * schema version takes them): every other one keyed (five keys, sequences in order, the key
 * counters or the key-order sequence set), lanes as `src/core/lanes.ts` computes them. Returns the event ids, sorted.
 */
export async function seedPending(client: pg.Pool, schema: string, count: number): Promise<string[]> {
  const ids = Array.from({ length: count }, (_, i) => `seed-${String(i).padStart(4, '0')}`);
  const keys = ids.map((_, i) => (i % 2 === 0 ? `key-${i % 5}` : null));
  const sequences = keys.map((key, i) => (key === null ? null : keys.slice(0, i + 1).filter((k) => k === key).length));
  const s = `"${schema}"`;
  await client.query(
    `INSERT INTO ${s}.relaybus_events (id, type, key, payload, headers, handlers, created_at)
    SELECT id, 't', key, '{}', '{}', '{h}', now() FROM unnest($1::text[], $2::text[]) AS x(id, key)`,
    [ids, keys],
  );
  await client.query(
    `INSERT INTO ${s}.relaybus_deliveries
      (event_id, handler, lane, key, sequence, status, attempts, max_attempts, claims, available_at, created_at, updated_at)
    SELECT id, 'h', lane, key, sequence, 'pending', 0, 3, 0, now(), now(), now()
    FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[]) AS x(id, key, lane, sequence)`,
    [ids, keys, ids.map((id, i) => laneOf(keys[i], id)), sequences],
  );
  // The key order as the schema keeps it: key-counter rows before 0002, one sequence from 0002 on.
  const {
    rows: [layout],
  } = await client.query<{ counters: string | null }>(`SELECT to_regclass($1) AS counters`, [
    `${s}.relaybus_key_sequences`,
  ]);
  if (layout?.counters) {
    await client.query(`INSERT INTO ${s}.relaybus_key_sequences (key, last_sequence)
      SELECT key, max(sequence) FROM ${s}.relaybus_deliveries WHERE key IS NOT NULL GROUP BY key`);
  } else {
    await client.query(`SELECT setval($1, (SELECT max(sequence) FROM ${s}.relaybus_deliveries))`, [
      `${s}.relaybus_key_order`,
    ]);
  }
  return ids.sort();
}

/**
 * Claim and complete until nothing is due; returns the event ids run, sorted. Fails on a delivery
 * claimed twice and on a key run out of sequence order.
 */
export async function drain<TTx>(store: Store<TTx>, handlers: readonly string[]): Promise<string[]> {
  const seen = new Set<string>();
  const lastSequence = new Map<string, bigint>();
  for (let round = 0; round < 10_000; round += 1) {
    const batch = await claim(store, { owner: 'drain', handlers, limit: 200, leaseDurationMs: 30_000 });
    if (batch.length === 0) break;
    for (const delivery of batch) {
      const id = `${delivery.eventId}/${delivery.handler}`;
      assert.ok(!seen.has(id), `${id} claimed twice`);
      seen.add(id);
      if (delivery.key !== null && delivery.sequence !== null) {
        const order = `${delivery.handler}/${delivery.key}`;
        const sequence = BigInt(delivery.sequence);
        assert.ok(
          (lastSequence.get(order) ?? -1n) < sequence,
          `${order} ran sequence ${sequence} after ${lastSequence.get(order)}`,
        );
        lastSequence.set(order, sequence);
      }
    }
    await store.completeMany(batch.map((d) => ({ deliveryId: d.id, leaseToken: d.leaseToken })));
  }
  await relinquish(store, 'drain');
  return [...seen].map((id) => id.slice(0, id.lastIndexOf('/'))).sort();
}

/** The 0.1 layout, from the reference: one row per (event, handler) rewritten at claim, renewal and completion. */
export function rowLeaseLayout(schema: string): string {
  const s = `"${schema}"`;
  return `
CREATE SCHEMA ${s};
CREATE TABLE ${s}.relaybus_events (
  id text PRIMARY KEY,
  type text NOT NULL,
  key text,
  payload jsonb NOT NULL,
  headers jsonb NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE ${s}.relaybus_deliveries (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  event_id text NOT NULL REFERENCES ${s}.relaybus_events (id) ON DELETE CASCADE,
  handler text NOT NULL,
  key text,
  sequence bigint,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing', 'completed', 'dead')),
  attempts integer NOT NULL DEFAULT 0,
  max_attempts integer NOT NULL DEFAULT 10,
  available_at timestamptz NOT NULL DEFAULT now(),
  lease_owner text,
  lease_token text,
  lease_expires_at timestamptz,
  last_error text,
  completed_at timestamptz,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX relaybus_deliveries_event_handler_unique ON ${s}.relaybus_deliveries (event_id, handler);
CREATE INDEX relaybus_deliveries_due_idx ON ${s}.relaybus_deliveries (handler, available_at, id) WHERE status = 'pending';
CREATE INDEX relaybus_deliveries_due_unkeyed_idx ON ${s}.relaybus_deliveries (available_at, id) WHERE status = 'pending' AND key IS NULL;
CREATE INDEX relaybus_deliveries_key_order_idx ON ${s}.relaybus_deliveries (handler, key, sequence)
  WHERE key IS NOT NULL AND status IN ('pending', 'processing');
CREATE INDEX relaybus_deliveries_processing_idx ON ${s}.relaybus_deliveries (lease_expires_at) WHERE status = 'processing';
CREATE INDEX relaybus_deliveries_status_created_idx ON ${s}.relaybus_deliveries (status, created_at);
CREATE INDEX relaybus_deliveries_handler_created_idx ON ${s}.relaybus_deliveries (handler, created_at);
CREATE INDEX relaybus_deliveries_completed_idx ON ${s}.relaybus_deliveries (completed_at) WHERE status = 'completed';
CREATE INDEX relaybus_deliveries_dead_idx ON ${s}.relaybus_deliveries (updated_at) WHERE status = 'dead';
`;
}

/** Handlers of the seeded 0.1 deliveries. */
export const HANDLERS = ['email', 'ledger'] as const;

/** Ordering keys, unicode among them (the lane hashes UTF-8 bytes). */
export const KEYS = Array.from(
  { length: 48 },
  (_, i) => `${['customer-', 'kunde-ü-', '顧客-', '🎉-', 'Ζ-'][i % 5]}${i}`,
);

/**
 * `events` events, each with a delivery for both handlers, in 0.1 states: per (handler, key) the
 * first 30% completed (every seventh of them dead), then the head in flight under an expired lease
 * (processing), then pending; unkeyed ones by event number. Attempts as 0.1 counted them (at claim).
 * One processing delivery spent its last attempt: the upgrade makes it dead, as a takeover would.
 */
export async function seedRowLease(admin: pg.Pool, schema: string, events: number): Promise<void> {
  const s = `"${schema}"`;
  await admin.query(
    `INSERT INTO ${s}.relaybus_events (id, type, key, payload, created_at)
    SELECT 'evt-' || lpad(n::text, 6, '0'), 'order.placed', CASE WHEN n % 3 <> 0 THEN ($1::text[])[1 + n % array_length($1::text[], 1)] END,
           jsonb_build_object('n', n), now() - interval '2 hours' + n * interval '1 ms'
    FROM generate_series(1, $2::int) AS n`,
    [KEYS, events],
  );
  await admin.query(
    `
    WITH ev AS (
      SELECT e.id, e.key, (e.payload ->> 'n')::int AS n,
             row_number() OVER (PARTITION BY e.key ORDER BY e.id) AS seq, count(*) OVER (PARTITION BY e.key) AS total
      FROM ${s}.relaybus_events e
    ),
    rows AS (
      SELECT ev.*, h.handler,
        CASE
          WHEN ev.key IS NULL THEN (ARRAY['completed', 'completed', 'completed', 'dead', 'processing', 'pending', 'pending', 'pending', 'pending', 'pending'])[1 + ev.n % 10]
          WHEN ev.seq <= ev.total * 3 / 10 THEN CASE WHEN ev.seq % 7 = 0 THEN 'dead' ELSE 'completed' END
          WHEN ev.seq = ev.total * 3 / 10 + 1 THEN 'processing'
          ELSE 'pending'
        END AS status
      FROM ev CROSS JOIN unnest($1::text[]) AS h(handler)
    )
    INSERT INTO ${s}.relaybus_deliveries (event_id, handler, key, sequence, status, attempts, max_attempts, available_at,
                                          lease_owner, lease_token, lease_expires_at, last_error, completed_at, created_at, updated_at)
    SELECT id, handler, key, CASE WHEN key IS NOT NULL THEN seq END, status,
           CASE status WHEN 'completed' THEN 1 WHEN 'dead' THEN 3 WHEN 'processing' THEN 1 + n % 2 ELSE CASE WHEN n % 3 = 1 THEN 1 ELSE 0 END END,
           3, now() - interval '1 minute',
           CASE WHEN status = 'processing' THEN 'worker-0.1-' || n % 3 END,
           CASE WHEN status = 'processing' THEN 'token-' || n || '-' || handler END,
           CASE WHEN status = 'processing' THEN now() - interval '5 minutes' END,
           CASE WHEN status = 'dead' OR (status = 'pending' AND n % 3 = 1) THEN 'boom' END,
           CASE WHEN status = 'completed' THEN now() - interval '90 minutes' END,
           now() - interval '2 hours', now() - interval '90 minutes'
    FROM rows ORDER BY n, handler`,
    [HANDLERS],
  );
  await admin.query(`UPDATE ${s}.relaybus_deliveries SET attempts = max_attempts
    WHERE id = (SELECT min(id) FROM ${s}.relaybus_deliveries WHERE status = 'processing' AND key IS NULL)`);
}

/** The catalog and rows of a 0.1 schema (for "nothing changed"). */
export async function snapshotRowLease(admin: pg.Pool, schema: string) {
  const rows = async (table: string) => (await admin.query(`SELECT * FROM "${schema}".${table} ORDER BY 1`)).rows;
  const functions = await admin.query(
    `SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1`,
    [schema],
  );
  const tables = await admin.query(
    `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`,
    [schema],
  );
  const indexes = await admin.query(`SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = $1 ORDER BY 1`, [
    schema,
  ]);
  const columns = await admin.query(
    `SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = $1 ORDER BY 1, 2`,
    [schema],
  );
  return {
    deliveries: await rows('relaybus_deliveries'),
    events: await rows('relaybus_events'),
    functions: functions.rows,
    tables: tables.rows,
    indexes: indexes.rows,
    columns: columns.rows,
  };
}
