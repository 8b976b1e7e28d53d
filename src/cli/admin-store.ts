import { InvalidOptionsError, SchemaMismatchError } from '../index.js';
import {
  DEFAULT_SCHEMA,
  fromPg,
  postgresStore,
  type PgPoolLike,
  type PostgresDriver,
  type PostgresStore,
  type PgClientLike,
} from '../postgres/index.js';
import { assertSchemaName } from '../postgres/schema-sql.js';
import { CliFailure, UsageError, type CliContext } from './command.js';

/**
 * The admin commands (`setup`, `stats`, `dead`, `purge`) open their own Postgres store: a small
 * `pg` pool from `--database-url` (or `DATABASE_URL`) and `--schema`, closed when the command ends.
 * `pg` is an optional peer of relaybus, so it is imported on demand with a clear message when it is
 * missing.
 */

/** A store the CLI opened itself, with where it points (password removed) for messages. */
export interface AdminStore {
  readonly store: PostgresStore<PgClientLike>;
  readonly schema: string;
  /** `host:port/database`, for human output. */
  readonly target: string;
  close(): Promise<void>;
}

interface PgModule {
  readonly Pool: new (config: {
    connectionString: string;
    max: number;
    connectionTimeoutMillis: number;
    application_name: string;
  }) => PgPoolLike & {
    on(event: 'error', listener: (error: Error) => void): unknown;
  };
}

/** Where a connection string points, without credentials: `host:port/database`. */
export function describeTarget(url: string): string {
  try {
    const parsed = new URL(url);
    return `${parsed.hostname || 'localhost'}${parsed.port ? `:${parsed.port}` : ''}${parsed.pathname || '/'}`;
  } catch {
    return 'the configured database';
  }
}

async function importPg(): Promise<PgModule> {
  try {
    const module = (await import('pg')) as unknown as { default?: PgModule } & PgModule;
    return module.default ?? module;
  } catch (error) {
    if ((error as { code?: unknown }).code === 'ERR_MODULE_NOT_FOUND') {
      throw new CliFailure('relaybus connects with the pg package, which is not installed here: npm install pg');
    }
    throw error;
  }
}

/** A driver the CLI opened on its flags, with the schema and where it points (password removed) for messages. */
export interface AdminConnection {
  readonly driver: PostgresDriver<PgClientLike>;
  readonly schema: string;
  /** `host:port/database`, for human output. */
  readonly target: string;
}

/**
 * Open a small `pg` pool on `--database-url` (or DATABASE_URL) and `--schema`; the driver ends it on `close()`. Throws
 * `UsageError` when no database is given or the schema name is not one.
 */
export async function openAdminConnection(
  flags: { readonly 'database-url'?: string; readonly schema?: string },
  context: CliContext,
  maxConnections: number,
): Promise<AdminConnection> {
  const url = flags['database-url'] ?? context.env.DATABASE_URL;
  if (url === undefined || url.trim() === '') {
    throw new UsageError('no database: pass --database-url postgres://user@host:5432/db or set DATABASE_URL');
  }
  const schema = flags.schema ?? DEFAULT_SCHEMA;
  try {
    assertSchemaName(schema);
  } catch (error) {
    if (error instanceof InvalidOptionsError) throw new UsageError(`--schema: ${error.message}`);
    throw error;
  }
  const { Pool } = await importPg();
  const pool = new Pool({
    connectionString: url,
    max: maxConnections,
    connectionTimeoutMillis: 10_000,
    application_name: 'relaybus-cli',
  });
  pool.on('error', () => {}); // an idle client dropped by the server: the next query reports it
  return { driver: fromPg(pool, { closeWithStore: true }), schema, target: describeTarget(url) };
}

/** Open the store the admin flags point at; throws `UsageError` when no database is given. */
export async function openAdminStore(
  flags: { readonly 'database-url'?: string; readonly schema?: string },
  context: CliContext,
): Promise<AdminStore> {
  const { driver, schema, target } = await openAdminConnection(flags, context, 2);
  const store = postgresStore({ driver, schema });
  return { store, schema, target, close: () => store.close() };
}

/** Run `fn` with an admin store, closing it afterwards whatever happens. */
export async function withAdminStore<T>(
  flags: { readonly 'database-url'?: string; readonly schema?: string },
  context: CliContext,
  fn: (admin: AdminStore) => Promise<T>,
): Promise<T> {
  const admin = await openAdminStore(flags, context);
  try {
    return await fn(admin);
  } catch (error) {
    // The store's message already names the command to run (`npx relaybus setup --schema ...`).
    if (error instanceof SchemaMismatchError) throw new CliFailure(error.message, { cause: error });
    throw error;
  } finally {
    await admin.close().catch(() => {});
  }
}
