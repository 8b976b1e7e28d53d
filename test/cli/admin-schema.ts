/**
 * A schema of its own for a CLI test file of the admin commands: a pool and a Postgres store on it (set up before the
 * file's tests), the flags that point the built bin at it, and the schema dropped after them. Call it inside the
 * file's `describe`, whose hooks these become.
 */
import { after, before } from 'node:test';
import pg from 'pg';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import { uniqueSchemaName } from '../support/databases.js';

export interface AdminSchema {
  readonly schema: string;
  /** `--database-url <url> --schema <schema>`. */
  readonly flags: readonly string[];
  /** The store on the schema, once the file's `before` ran. */
  readonly store: PostgresStore<PgClientLike>;
}

export function useAdminSchema(label: string, url: string): AdminSchema {
  const schema = uniqueSchemaName(label);
  let pool: pg.Pool | undefined;
  let store: PostgresStore<PgClientLike> | undefined;
  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 2 });
    store = postgresStore({ driver: fromPg(pool), schema });
    await store.setup();
  });
  after(async () => {
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });
  return {
    schema,
    flags: ['--database-url', url, '--schema', schema],
    get store() {
      if (store === undefined) throw new Error(`${label}: the admin schema is not open yet (use it inside a test)`);
      return store;
    },
  };
}
