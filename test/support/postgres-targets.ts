/**
 * Contract targets for the Postgres store: one per driver. Each opened harness gets a schema of its
 * own (set up fresh, dropped on close), so test files never share tables.
 */
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { fromPg, fromPglite, postgresStore, type PgClientLike, type PgliteQueryableLike, type PostgresStore } from '../../src/postgres/index.js';
import type { StoreCapabilities } from '../../src/store/contract.js';
import { findPostgres, uniqueSchemaName } from './databases.js';
import { StubClock, transactionRunner, type ContractTarget, type Harness, type HarnessOptions } from './harness.js';

export { transactionRunner };

/** SQL that empties a relaybus schema between tests and frees every lane. */
export function resetSql(schema: string): string {
  const s = `"${schema}"`;
  return `TRUNCATE ${s}.relaybus_deliveries, ${s}.relaybus_events, ${s}.relaybus_key_sequences, ${s}.relaybus_completed_deliveries;
          UPDATE ${s}.relaybus_lanes SET lease_owner = NULL, lease_expires_at = NULL, in_flight = '{}';`;
}

function capabilitiesOf(concurrentConnections: boolean): StoreCapabilities {
  // completionHistory: true because open({ completionHistory: true }) gives such a store.
  return { transactions: true, completionHistory: true, wakeups: 'poll', concurrentConnections };
}

/** The Postgres store over a `pg` pool on the test server. */
export function pgTarget(options: { preparedStatements?: boolean } = {}): ContractTarget<PgClientLike> {
  const prepared = options.preparedStatements ?? true;
  return {
    name: prepared ? 'postgres store / pg' : 'postgres store / pg, preparedStatements: false',
    capabilities: capabilitiesOf(true),
    async probe() {
      const found = await findPostgres();
      return 'skip' in found ? found.skip : undefined;
    },
    async open(harnessOptions: HarnessOptions = {}): Promise<Harness<PgClientLike>> {
      const found = await findPostgres();
      if ('skip' in found) throw new Error(found.skip);
      const pool = new pg.Pool({ connectionString: found.url, max: 8 });
      const schema = uniqueSchemaName(prepared ? 'pg' : 'pg_unprepared');
      const store: PostgresStore<PgClientLike> = postgresStore({
        driver: fromPg(pool, { preparedStatements: prepared }), schema, completionHistory: harnessOptions.completionHistory ?? false,
      });
      await store.setup();
      return {
        store,
        clock: new StubClock(),
        inTransaction: transactionRunner(store),
        reset: async () => { await pool.query(resetSql(schema)); },
        close: async () => {
          await pool.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
          await pool.end();
        },
      };
    },
  };
}

/** The Postgres store over an embedded PGlite database (one connection). */
export function pgliteTarget(): ContractTarget<PgliteQueryableLike> {
  return {
    name: 'postgres store / pglite',
    capabilities: capabilitiesOf(false),
    probe: async () => undefined,
    async open(harnessOptions: HarnessOptions = {}): Promise<Harness<PgliteQueryableLike>> {
      const db = await PGlite.create();
      const store = postgresStore({ driver: fromPglite(db, { ownsDatabase: true }), completionHistory: harnessOptions.completionHistory ?? false });
      await store.setup();
      return {
        store,
        clock: new StubClock(),
        inTransaction: transactionRunner(store),
        reset: async () => { await db.exec(resetSql(store.schema)); },
        close: () => store.close(),
      };
    },
  };
}
