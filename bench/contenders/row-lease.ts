/**
 * The 0.1.0 row-lease design that relaybus replaces, written small, as the reference describes it
 * ("The problem" in reference/write-amplification.md): one delivery row per (event, handler) with
 * status and lease columns and ten indexes (primary key, (event, handler) unique and the eight
 * secondary ones: due time, unkeyed due time, ordering keys, status, handler, completed purge,
 * dead purge, lease expiry). The delivery row is written three times after its insert:
 *
 *   claim     UPDATE ... SET status = 'processing', attempts + 1, lease_owner, lease_token,
 *             lease_expires_at  (candidates picked FOR UPDATE SKIP LOCKED, one statement per batch)
 *   renew     UPDATE ... SET lease_expires_at  (every lease / 3 while handlers run)
 *   complete  UPDATE ... SET status = 'completed', completed_at, lease cleared  (one per delivery)
 *
 * Per-key ordering: a keyed delivery is claimable only when no earlier delivery of its handler and
 * key is pending or processing. The dispatcher loop mirrors relaybus's (concurrency, batch, poll).
 */
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import { HANDLERS, pairsOf, type Contender, type DispatcherHandle } from '../lib/types.js';
import { inTransaction, warmPool } from '../lib/db.js';

const LEASE_MS = 30_000;

const ddl = (s: string) => `
CREATE SCHEMA "${s}";
CREATE TABLE "${s}".rl_events (
  id text PRIMARY KEY, type text NOT NULL, key text, payload jsonb NOT NULL, headers jsonb NOT NULL DEFAULT '{}',
  created_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE "${s}".rl_key_sequences (key text PRIMARY KEY, last_sequence bigint NOT NULL);
CREATE TABLE "${s}".rl_deliveries (
  id bigserial PRIMARY KEY,
  event_id text NOT NULL REFERENCES "${s}".rl_events (id) ON DELETE CASCADE,
  handler text NOT NULL, key text, sequence bigint,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'processing', 'completed', 'dead')),
  attempts int NOT NULL DEFAULT 0, max_attempts int NOT NULL DEFAULT 10,
  available_at timestamptz NOT NULL DEFAULT now(),
  lease_owner text, lease_token text, lease_expires_at timestamptz, last_error text,
  created_at timestamptz NOT NULL DEFAULT now(), updated_at timestamptz NOT NULL DEFAULT now(), completed_at timestamptz);
CREATE UNIQUE INDEX rl_deliveries_event_handler_unique ON "${s}".rl_deliveries (event_id, handler);
CREATE INDEX rl_deliveries_due_idx ON "${s}".rl_deliveries (available_at, id) WHERE status IN ('pending', 'processing');
CREATE INDEX rl_deliveries_due_unkeyed_idx ON "${s}".rl_deliveries (handler, available_at) WHERE status IN ('pending', 'processing') AND key IS NULL;
CREATE INDEX rl_deliveries_ordering_idx ON "${s}".rl_deliveries (handler, key, sequence) WHERE key IS NOT NULL AND status IN ('pending', 'processing');
CREATE INDEX rl_deliveries_status_created_idx ON "${s}".rl_deliveries (status, created_at);
CREATE INDEX rl_deliveries_handler_created_idx ON "${s}".rl_deliveries (handler, created_at);
CREATE INDEX rl_deliveries_completed_idx ON "${s}".rl_deliveries (completed_at) WHERE status = 'completed';
CREATE INDEX rl_deliveries_dead_idx ON "${s}".rl_deliveries (updated_at) WHERE status = 'dead';
CREATE INDEX rl_deliveries_lease_idx ON "${s}".rl_deliveries (lease_expires_at) WHERE status = 'processing';
`;

const publishSql = (s: string) => `
WITH input AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS i(ord int, id text, key text, payload jsonb)
),
ev AS (
  INSERT INTO "${s}".rl_events (id, type, key, payload) SELECT id, 'bench.event', key, payload FROM input ORDER BY ord RETURNING id
),
keyed AS (SELECT key, count(*) AS n FROM input WHERE key IS NOT NULL GROUP BY key),
bumped AS (
  INSERT INTO "${s}".rl_key_sequences AS k (key, last_sequence) SELECT key, n FROM keyed ORDER BY key
  ON CONFLICT (key) DO UPDATE SET last_sequence = k.last_sequence + excluded.last_sequence
  RETURNING key, last_sequence
),
numbered AS (
  SELECT i.ord, b.last_sequence - count(*) OVER (PARTITION BY i.key) + row_number() OVER (PARTITION BY i.key ORDER BY i.ord) AS seq
  FROM input i JOIN bumped b ON b.key = i.key
)
INSERT INTO "${s}".rl_deliveries (event_id, handler, key, sequence)
SELECT i.id, h.handler, i.key, n.seq
FROM input i LEFT JOIN numbered n ON n.ord = i.ord CROSS JOIN unnest($2::text[]) AS h(handler)
WHERE i.id IN (SELECT id FROM ev)
ORDER BY i.ord, h.handler`;

// Due (or lease-expired) candidates, keyed ones only when no earlier delivery of their key is unfinished.
const claimSql = (s: string) => `
WITH candidates AS (
  SELECT d.id FROM "${s}".rl_deliveries d
  WHERE d.handler = ANY ($1::text[])
    AND ((d.status = 'pending' AND d.available_at <= now()) OR (d.status = 'processing' AND d.lease_expires_at <= now()))
    AND (d.key IS NULL OR NOT EXISTS (
      SELECT 1 FROM "${s}".rl_deliveries p
      WHERE p.handler = d.handler AND p.key = d.key AND p.sequence < d.sequence AND p.status IN ('pending', 'processing')))
  ORDER BY d.available_at, d.id
  LIMIT $2::int
  FOR UPDATE SKIP LOCKED
)
UPDATE "${s}".rl_deliveries d
SET status = 'processing', attempts = d.attempts + 1, lease_owner = $3, lease_token = $4 || ':' || d.id,
    lease_expires_at = now() + make_interval(secs => $5::int / 1000.0), updated_at = now()
FROM candidates c, "${s}".rl_events e
WHERE d.id = c.id AND e.id = d.event_id
RETURNING d.id::text AS id, d.handler, d.lease_token, e.payload`;

const completeSql = (s: string) => `
UPDATE "${s}".rl_deliveries
SET status = 'completed', completed_at = now(), updated_at = now(), lease_owner = NULL, lease_token = NULL, lease_expires_at = NULL
WHERE id = $1::bigint AND lease_token = $2 AND status = 'processing'`;

const renewSql = (s: string) => `
UPDATE "${s}".rl_deliveries SET lease_expires_at = now() + make_interval(secs => $3::int / 1000.0)
WHERE id = ANY ($1::bigint[]) AND lease_owner = $2 AND status = 'processing'`;

/** The baseline's statements, for bench/pageinspect.ts. */
export const rowLeaseSql = {
  ddl,
  publish: publishSql,
  claim: claimSql,
  complete: completeSql,
  renew: renewSql,
} as const;

export const rowLease: Contender = {
  name: 'row-lease',
  ordersKeys: true,
  keyed: true,
  retryBackoff: false,
  keyedVariants: ['defaults', 'tuned'],
  variants: {
    defaults: { concurrency: 10, batchSize: 10, pollIntervalMs: 1000, poolSize: 10 },
    // Its best of 200/200 and relaybus's 1,000/500 (2,283-2,612 vs 2,160-2,552/s here: a statement per completion dominates).
    tuned: { concurrency: 200, batchSize: 200, pollIntervalMs: 50, poolSize: 20 },
  },
  tables: { deliveries: 'rl_deliveries' },

  async setup(url, schema) {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query(ddl(schema));
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
    } = await admin.query<{ pending: string; dead: string; done: string }>(
      `SELECT count(*) FILTER (WHERE status IN ('pending', 'processing')) AS pending, count(*) FILTER (WHERE status = 'dead') AS dead,
              count(*) FILTER (WHERE status = 'completed') AS done
       FROM "${schema}".rl_deliveries`,
    );
    return { pending: Number(row!.pending), dead: Number(row!.dead), completedRows: Number(row!.done) };
  },

  async stored(admin, schema) {
    const { rows } = await admin.query<{ i: string; handler: string }>(
      `SELECT substr(event_id, 2) AS i, handler FROM "${schema}".rl_deliveries WHERE status = 'pending'`,
    );
    return pairsOf(rows);
  },

  async publisher({ url, schema, poolSize }) {
    const pool = new pg.Pool({ connectionString: url, max: poolSize });
    const text = publishSql(schema);
    const name = 'rl_publish_' + schema;
    return {
      async publish(events) {
        const input = JSON.stringify(events.map((e, ord) => ({ ord, id: `e${e.i}`, key: e.key, payload: { i: e.i } })));
        await inTransaction(pool, async (client) => {
          await client.query({ name, text, values: [input, HANDLERS] });
        });
      },
      close: () => pool.end(),
    };
  },

  async dispatcher({ url, schema }, settings, { onHandle }): Promise<DispatcherHandle> {
    const pool = new pg.Pool({ connectionString: url, max: settings.poolSize });
    const owner = `rl:${process.pid}:${randomBytes(4).toString('hex')}`;
    const claim = { name: 'rl_claim_' + schema, text: claimSql(schema) };
    const complete = { name: 'rl_complete_' + schema, text: completeSql(schema) };
    const renew = { name: 'rl_renew_' + schema, text: renewSql(schema) };
    const handlers = [...HANDLERS];
    const inFlight = new Set<string>();
    let running = 0;
    let stopping = false;
    let wake: (() => void) | undefined;
    const idle = new Set<Promise<void>>();
    let loop: Promise<void> = Promise.resolve();
    let renewTimer: NodeJS.Timeout | undefined;

    async function runOne(row: {
      id: string;
      handler: string;
      lease_token: string;
      payload: { i: number };
    }): Promise<void> {
      const running = onHandle(row.payload.i, handlers.indexOf(row.handler as (typeof HANDLERS)[number]));
      if (running) await running;
      await pool.query({ ...complete, values: [row.id, row.lease_token] });
    }

    async function claimLoop(): Promise<void> {
      while (!stopping) {
        const free = settings.concurrency - running;
        if (free > 0) {
          const limit = Math.min(settings.batchSize, free);
          const { rows } = await pool.query({ ...claim, values: [handlers, limit, owner, owner, LEASE_MS] });
          for (const row of rows) {
            running += 1;
            inFlight.add(row.id);
            const p: Promise<void> = runOne(row).finally(() => {
              running -= 1;
              inFlight.delete(row.id);
              idle.delete(p);
              wake?.();
            });
            idle.add(p);
          }
          if (rows.length >= limit) continue;
        }
        await new Promise<void>((resolve) => {
          const timer = setTimeout(resolve, settings.pollIntervalMs);
          wake = () => {
            clearTimeout(timer);
            wake = undefined;
            resolve();
          };
        });
      }
    }

    return {
      prepare: () => warmPool(pool, settings.poolSize),
      async start() {
        renewTimer = setInterval(() => {
          if (inFlight.size > 0)
            void pool.query({ ...renew, values: [[...inFlight], owner, LEASE_MS] }).catch(() => {});
        }, LEASE_MS / 3);
        loop = claimLoop();
      },
      async stop() {
        stopping = true;
        wake?.();
        await loop;
        await Promise.all([...idle]);
        clearInterval(renewTimer);
        await pool.end();
      },
    };
  },
};
