/**
 * Contract targets for the Postgres store: one per driver. Each opened harness gets a schema of its
 * own (set up fresh, dropped on close), so test files never share tables.
 */
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import {
  fromPg,
  fromPglite,
  postgresStore,
  type PgClientLike,
  type PgliteQueryableLike,
  type PostgresDriver,
} from '../../src/postgres/index.js';
import type { StoreCapabilities } from '../../src/store/contract.js';
import { findPostgres, uniqueSchemaName } from './databases.js';
import { StubClock, transactionRunner, type ContractTarget, type Harness, type HarnessOptions } from './harness.js';

/** Connections per harness on the test server. */
export const POOL_SIZE = 8;

export { transactionRunner };

/** SQL that empties a relaybus schema between tests and frees every lane. */
export function resetSql(schema: string): string {
  const s = `"${schema}"`;
  return `TRUNCATE ${s}.relaybus_deliveries, ${s}.relaybus_events, ${s}.relaybus_subscriptions, ${s}.relaybus_completed_deliveries,
                   ${s}.relaybus_paused_handlers, ${s}.relaybus_replays, ${s}.relaybus_replay_items;
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

/** A store in a fresh schema of `driver`'s database, set up; closing drops the schema, then calls `end`. */
export async function schemaHarness<TTx>(
  driver: PostgresDriver<TTx>,
  label: string,
  options: HarnessOptions,
  end: () => Promise<void>,
): Promise<Harness<TTx>> {
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
}

/** A target on the test Postgres server: a schema per harness, set up by the store, dropped on close. */
export function serverTarget<TTx>(
  name: string,
  label: string,
  connect: (url: string) => Connection<TTx>,
): ContractTarget<TTx> {
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
      return schemaHarness(driver, label, options, end);
    },
  };
}

/**
 * A target on embedded PGlite (one connection). An instance takes about half a gigabyte, so the
 * harnesses of one target share one instance, each in a schema of its own.
 */
export function pgliteTarget<TTx = PgliteQueryableLike>(
  name = 'postgres store / pglite',
  label = 'pglite',
  makeDriver: (db: PGlite) => PostgresDriver<TTx> = (db) => fromPglite(db) as unknown as PostgresDriver<TTx>,
): ContractTarget<TTx> {
  let shared: { db: Promise<PGlite>; users: number } | undefined;
  return {
    name,
    capabilities: capabilities(false),
    probe: async () => undefined,
    async open(options: HarnessOptions = {}): Promise<Harness<TTx>> {
      shared ??= { db: PGlite.create(), users: 0 };
      const instance = shared;
      instance.users += 1;
      const db = await instance.db;
      return schemaHarness(makeDriver(db), label, options, async () => {
        instance.users -= 1;
        if (instance.users > 0) return;
        if (shared === instance) shared = undefined;
        await db.close();
      });
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
