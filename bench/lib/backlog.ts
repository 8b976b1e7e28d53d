/**
 * A backlog for the plan studies (explain.ts, claim-compare.ts): `deliveries` pending deliveries published through the
 * real store, `deliveries / 2` events with both handlers, 10 events per key (or unkeyed), in transactions of 1,000.
 * With `withIds` each event has an id (`e<i>`), so it is written to an events row that its deliveries' claims read;
 * without, each event travels inline in its deliveries, as the bench's dispatch cells publish.
 */
import type pg from 'pg';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import { HANDLERS } from './types.js';

/** The backlog's event type. */
export const BACKLOG_TYPE = 'bench.event';

export interface Backlog {
  readonly events: number;
  /** Distinct keys (0 when unkeyed). */
  readonly keys: number;
  readonly publishMs: number;
}

export async function publishBacklog(
  pool: pg.Pool,
  store: PostgresStore<PgClientLike>,
  deliveries: number,
  keyed = true,
  withIds = true,
): Promise<Backlog> {
  const handlers = HANDLERS.map((name) => ({ name, maxAttempts: 10 }));
  const events = deliveries / HANDLERS.length;
  const keys = keyed ? Math.ceil(events / 10) : 0;
  const started = Date.now();
  for (let from = 0; from < events; from += 1000) {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await store.publish(
        client,
        Array.from({ length: Math.min(1000, events - from) }, (_, k) => {
          const i = from + k;
          const key = keyed ? `k${i % keys}` : null;
          return { ...(withIds ? { id: `e${i}` } : {}), type: BACKLOG_TYPE, key, payload: { i }, handlers };
        }),
      );
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  }
  return { events, keys, publishMs: Date.now() - started };
}
