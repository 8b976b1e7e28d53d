/**
 * The raw-SQL floor: what the database itself allows for a lane-partitioned delete-on-complete
 * queue, with nothing else. Static lanes (each loop of a dispatcher owns a fixed slice of the 256
 * lanes, so no lease is written), claim = read the next rows of the owned lanes through
 * (lane, id), complete = one DELETE ... WHERE id = ANY(...) per batch. No handler calls (the
 * handled ids are only recorded, for the exactness check), no ordering, no fencing, no retries.
 * Publish is the plain BEGIN / INSERT (one row per handler) / COMMIT that the publish target
 * compares against.
 */
import pg from 'pg';
import { laneOf } from '../../src/core/lanes.js';
import { HANDLERS, type Contender, type DispatcherHandle } from '../lib/types.js';
import { inTransaction, warmPool } from '../lib/db.js';

export const rawSql: Contender = {
  name: 'raw-sql',
  ordersKeys: false,
  keyed: false,
  retryBackoff: false,
  keyedVariants: [],
  variants: {
    // loops: concurrent claim/delete loops per dispatcher process, each on its own slice of lanes.
    floor: { concurrency: 1000, batchSize: 1000, pollIntervalMs: 50, poolSize: 4, extra: { loops: 2 } },
  },
  tables: { deliveries: 'raw_deliveries' },

  async setup(url, schema) {
    const client = new pg.Client({ connectionString: url });
    await client.connect();
    try {
      await client.query(`
        CREATE SCHEMA "${schema}";
        CREATE TABLE "${schema}".raw_deliveries (
          id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, lane smallint NOT NULL, i int NOT NULL, handler smallint NOT NULL,
          key text, payload jsonb NOT NULL);
        CREATE INDEX raw_deliveries_lane_id_idx ON "${schema}".raw_deliveries (lane, id);`);
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
    } = await admin.query<{ n: string }>(`SELECT count(*) AS n FROM "${schema}".raw_deliveries`);
    return { pending: Number(row!.n), dead: 0, completedRows: 0 };
  },

  async stored(admin, schema) {
    const { rows } = await admin.query<{ i: number; h: number }>(
      `SELECT i, handler AS h FROM "${schema}".raw_deliveries`,
    );
    return { i: Int32Array.from(rows, (row) => row.i), h: Uint8Array.from(rows, (row) => row.h) };
  },

  async publisher({ url, schema, poolSize }) {
    const pool = new pg.Pool({ connectionString: url, max: poolSize });
    const insert = {
      name: 'raw_publish_' + schema,
      text: `INSERT INTO "${schema}".raw_deliveries (lane, i, handler, key, payload)
             SELECT t.lane, t.i, h.h, t.key, jsonb_build_object('i', t.i)
             FROM unnest($1::smallint[], $2::int[], $3::text[]) AS t(lane, i, key) CROSS JOIN unnest($4::smallint[]) AS h(h)`,
    };
    const handlerIds = HANDLERS.map((_, index) => index);
    return {
      async publish(events) {
        await inTransaction(pool, async (client) => {
          await client.query({
            ...insert,
            values: [
              events.map((e) => laneOf(e.key, `e${e.i}`)),
              events.map((e) => e.i),
              events.map((e) => e.key),
              handlerIds,
            ],
          });
        });
      },
      close: () => pool.end(),
    };
  },

  async dispatcher({ url, schema }, settings, { onHandle }): Promise<DispatcherHandle> {
    const loops = settings.extra?.loops ?? 1;
    const pool = new pg.Pool({ connectionString: url, max: Math.max(settings.poolSize, loops) });
    const claim = {
      name: 'raw_claim_' + schema,
      text: `SELECT id, i, handler FROM "${schema}".raw_deliveries WHERE lane = ANY ($1::smallint[]) LIMIT $2::int`,
    };
    const complete = {
      name: 'raw_complete_' + schema,
      text: `DELETE FROM "${schema}".raw_deliveries WHERE id = ANY ($1::bigint[])`,
    };
    // Static lanes: this process owns lanes ≡ slot (mod slots) of the dispatcher group; see BENCH_DISPATCHER_SLOT.
    const slot = Number(process.env.BENCH_DISPATCHER_SLOT ?? 0);
    const slots = Number(process.env.BENCH_DISPATCHER_SLOTS ?? 1);
    let stopping = false;
    const running: Promise<void>[] = [];

    async function loop(index: number): Promise<void> {
      const lanes: number[] = [];
      for (let lane = 0; lane < 256; lane += 1) if (lane % (slots * loops) === slot * loops + index) lanes.push(lane);
      while (!stopping) {
        const { rows } = await pool.query<{ id: string; i: number; handler: number }>({
          ...claim,
          values: [lanes, settings.batchSize],
        });
        if (rows.length === 0) {
          await new Promise((resolve) => setTimeout(resolve, settings.pollIntervalMs));
          continue;
        }
        for (const row of rows) onHandle(row.i, row.handler);
        await pool.query({ ...complete, values: [rows.map((row) => row.id)] });
      }
    }

    return {
      prepare: () => warmPool(pool, Math.max(settings.poolSize, loops)),
      async start() {
        for (let index = 0; index < loops; index += 1) running.push(loop(index));
      },
      async stop() {
        stopping = true;
        await Promise.all(running);
        await pool.end();
      },
    };
  },
};
