/**
 * Contract targets for the Postgres store: one per driver. Each opened harness gets a schema of its
 * own (set up fresh, dropped on close), so test files never share tables.
 */
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import { fromPg, fromPglite, postgresStore, type PgClientLike, type PgliteQueryableLike, type PostgresDriver } from '../../src/postgres/index.js';
import type { StoreCapabilities } from '../../src/store/contract.js';
import { findPostgres, uniqueSchemaName } from './databases.js';
import { StubClock, transactionRunner, type ContractTarget, type Harness, type HarnessOptions } from './harness.js';

/** Connections per harness on the test server. */
export const POOL_SIZE = 8;

export { transactionRunner };

/** SQL that empties a relaybus schema between tests and frees every lane. */
export function resetSql(schema: string): string {
  const s = `"${schema}"`;
  return `TRUNCATE ${s}.relaybus_deliveries, ${s}.relaybus_events, ${s}.relaybus_key_sequences, ${s}.relaybus_completed_deliveries;
          UPDATE ${s}.relaybus_lanes SET lease_owner = NULL, lease_expires_at = NULL, in_flight = '{}';`;
}

/** The Postgres store keeps a completion history when opened with `completionHistory: true`. */
export function capabilities(concurrentConnections: boolean): StoreCapabilities {
  return { transactions: true, completionHistory: true, wakeups: 'poll', concurrentConnections };
}

/** A driver over a fresh connection to the test server, and how to end that connection. */
export interface Connection<TTx> {
  readonly driver: PostgresDriver<TTx>;
  end(): Promise<void>;
}

/** A target on the test Postgres server: a schema per harness, set up by the store, dropped on close. */
export function serverTarget<TTx>(name: string, label: string, connect: (url: string) => Connection<TTx>): ContractTarget<TTx> {
  return {
    name,
    capabilities: capabilities(true),
    async probe() {
      const found = await findPostgres();
      return 'skip' in found ? found.skip : undefined;
    },
    async open(options: HarnessOptions = {}): Promise<Harness<TTx>> {
      const found = await findPostgres();
      if ('skip' in found) throw new Error(found.skip);
      const { driver, end } = connect(found.url);
      const schema = uniqueSchemaName(label);
      const store = postgresStore({ driver, schema, completionHistory: options.completionHistory ?? false });
      await store.setup();
      return {
        store,
        clock: new StubClock(),
        inTransaction: transactionRunner(store),
        reset: () => driver.executor.exec(resetSql(schema)),
        close: async () => {
          try {
            await driver.executor.exec(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
          } finally {
            await end();
          }
        },
      };
    },
  };
}

/** The Postgres store over a `pg` pool on the test server. */
export function pgTarget(options: { preparedStatements?: boolean } = {}): ContractTarget<PgClientLike> {
  const prepared = options.preparedStatements ?? true;
  return serverTarget(
    prepared ? 'postgres store / pg' : 'postgres store / pg, preparedStatements: false',
    prepared ? 'pg' : 'pg_unprepared',
    (url) => {
      const pool = new pg.Pool({ connectionString: url, max: POOL_SIZE });
      return { driver: fromPg(pool, { preparedStatements: prepared }), end: () => pool.end() };
    },
  );
}

/** The Postgres store over an embedded PGlite database (one connection). */
export function pgliteTarget(): ContractTarget<PgliteQueryableLike> {
  return {
    name: 'postgres store / pglite',
    capabilities: capabilities(false),
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
