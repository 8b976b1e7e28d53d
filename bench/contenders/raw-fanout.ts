/**
 * The fan-out floor of publish: what relaybus's design must write for an event, and nothing else, in plain SQL
 * through pg. One row per (event, handler) in a table with the columns, primary key and partial indexes of
 * relaybus's deliveries table, and the same key-order work: a transaction-scoped advisory lock per key (in hash
 * order), then one value of a sequence per keyed event. One statement per caller transaction (BEGIN, INSERT ...
 * SELECT over unnest of arrays, COMMIT), a named prepared statement. No events row (relaybus's default path writes
 * an event without a caller id inline, on its deliveries), no NOTIFY, no subscriptions read, no payload validation.
 * The raw-sql floor beside it writes lean rows (five columns, two indexes) with no key-order work.
 *
 * Publish only: it has no dispatcher (the raw-sql floor is the dispatch floor).
 */
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { laneOf } from '../../src/core/lanes.js';
import { HANDLERS, pairsOf, type Contender } from '../lib/types.js';
import { inTransaction } from '../lib/db.js';

/** The advisory-lock class id of the floor's key locks (relaybus uses its events table's oid; any constant will do). */
const LOCK_CLASS = 48_048;

export const rawFanout: Contender = {
  name: 'raw-fanout',
  ordersKeys: false,
  keyed: true,
  retryBackoff: false,
  keyedVariants: [],
  variants: {},
  tables: { deliveries: 'raw_fanout_deliveries' },

  async setup(url, schema) {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      // The columns, checks and indexes of relaybus_deliveries (schema/postgres.ts), and its key-order sequence.
      await client.query(`
        CREATE SCHEMA "${schema}";
        CREATE TABLE "${schema}".raw_fanout_deliveries (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, event_id text NOT NULL, handler text NOT NULL,
          lane smallint NOT NULL CHECK (lane >= 0 AND lane < 256), key text, sequence bigint,
          status text NOT NULL CHECK (status IN ('pending', 'dead', 'completed')), attempts integer NOT NULL,
          max_attempts integer NOT NULL, claims integer NOT NULL, available_at timestamptz NOT NULL, last_error text,
          created_at timestamptz NOT NULL, updated_at timestamptz NOT NULL, event_type text, payload jsonb, headers jsonb,
          CHECK (attempts >= 0 AND max_attempts >= 1));
        CREATE INDEX ON "${schema}".raw_fanout_deliveries (lane, available_at, id) WHERE key IS NULL AND status = 'pending';
        CREATE INDEX ON "${schema}".raw_fanout_deliveries (lane, handler, key, sequence) WHERE key IS NOT NULL AND status = 'pending';
        CREATE INDEX ON "${schema}".raw_fanout_deliveries (lane, available_at) WHERE key IS NOT NULL AND status = 'pending';
        CREATE INDEX ON "${schema}".raw_fanout_deliveries (updated_at, id) WHERE status = 'dead';
        CREATE SEQUENCE "${schema}".raw_fanout_key_order;`);
    } finally {
      await client.end();
    }
  },

  async teardown(admin, schema) {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  },

  async remaining(admin, schema) {
    const {
      rows: [row],
    } = await admin.query<{ n: string }>(
      `SELECT count(*) AS n FROM "${schema}".raw_fanout_deliveries WHERE status = 'pending'`,
    );
    return { pending: Number(row!.n), dead: 0, completedRows: 0 };
  },

  async stored(admin, schema) {
    const { rows } = await admin.query<{ i: string; handler: string }>(
      `SELECT payload->>'i' AS i, handler FROM "${schema}".raw_fanout_deliveries`,
    );
    return pairsOf(rows);
  },

  async publisher({ url, schema, poolSize }) {
    const pool = new pg.Pool({ connectionString: url, max: poolSize });
    const insert = {
      name: `raw_fanout_publish_${schema}`,
      text: `WITH input AS (
               SELECT t.ord, t.id, t.lane, t.key, t.payload
               FROM unnest($1::text[], $2::smallint[], $3::text[], $4::jsonb[]) WITH ORDINALITY AS t(id, lane, key, payload, ord)
             ),
             locked AS (
               SELECT count(pg_advisory_xact_lock(${LOCK_CLASS}, k.hash)) AS n
               FROM (SELECT DISTINCT hashtext(key) AS hash FROM input WHERE key IS NOT NULL ORDER BY 1) k
             ),
             numbered AS (
               SELECT k.ord, nextval('"${schema}".raw_fanout_key_order') AS sequence
               FROM (SELECT ord FROM input WHERE key IS NOT NULL AND (SELECT n FROM locked) >= 0 ORDER BY ord) k
             )
             INSERT INTO "${schema}".raw_fanout_deliveries
               (event_id, handler, lane, key, sequence, status, attempts, max_attempts, claims, available_at, created_at,
                updated_at, event_type, payload)
             SELECT i.id, h.handler, i.lane, i.key, n.sequence, 'pending', 0, 10, 0, now(), now(), now(), 'bench.event', i.payload
             FROM input i CROSS JOIN unnest($5::text[]) AS h(handler) LEFT JOIN numbered n ON n.ord = i.ord
             ORDER BY i.ord, h.handler`,
    };
    return {
      async publish(events) {
        const ids = events.map(() => randomUUID());
        await inTransaction(pool, async (client) => {
          await client.query({
            ...insert,
            values: [
              ids,
              events.map((e, n) => laneOf(e.key, ids[n]!)),
              events.map((e) => e.key),
              events.map((e) => JSON.stringify({ i: e.i })),
              [...HANDLERS],
            ],
          });
        });
      },
      close: () => pool.end(),
    };
  },

  async dispatcher() {
    throw new Error('raw-fanout is a publish floor: it has no dispatcher (raw-sql is the dispatch floor)');
  },
};
