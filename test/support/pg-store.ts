/**
 * A `pg` pool and a Postgres store in a schema of its own for one suite: opened and set up in the
 * suite's `before` (handed to `onOpen`), the schema dropped and the pool ended in its `after`.
 */
import { after, before } from 'node:test';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { findPostgres, uniqueSchemaName } from './databases.js';

export interface OpenedPgStore {
  readonly pool: pg.Pool;
  readonly store: PostgresStore<PgClientLike>;
}

/**
 * Returns the schema name. `max` connections: 1 for tests that read one backend's own counters or
 * prepared statements.
 *
 * ```ts
 * let pool: pg.Pool;
 * let store: PostgresStore<PgClientLike>;
 * const schema = usePgStore('lock_order', 8, (opened) => ({ pool, store } = opened));
 * ```
 */
export function usePgStore(label: string, max: number, onOpen: (opened: OpenedPgStore) => void): string {
  const schema = uniqueSchemaName(label);
  let pool: pg.Pool | undefined;
  before(async () => {
    const found = await findPostgres();
    pool = new pg.Pool({ connectionString: 'url' in found ? found.url : '', max });
    const store = postgresStore({ driver: fromPg(pool), schema });
    await store.setup();
    onOpen({ pool, store });
  });
  after(async () => {
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });
  return schema;
}
