import { SchemaMismatchError } from '../../core/errors.js';
import type { RowOf } from '../rows.js';
import type { Migration } from '../schema-sql.js';
import type { SqlExecutor } from '../sql-client.js';
import type { Statements } from '../statements.js';

/**
 * What a schema holds before `setup()` changes it, decided from the catalog alone: nothing of
 * relaybus's (install), the row-lease layout of relaybus 0.1 (upgrade it), or relaybus's own
 * versioned layout with the migrations it records (apply the missing ones). Anything else is
 * refused before a statement writes: a newer relaybus's schema (never downgraded), tables that
 * carry relaybus's names without its migrations table (another application's, or a copy), or a
 * migrations table that records nothing.
 */

export type Layout =
  | { readonly kind: 'empty'; readonly schemaExists: boolean }
  | { readonly kind: 'row-lease'; readonly applied: readonly string[] }
  | { readonly kind: 'relaybus'; readonly applied: readonly string[] };

type InspectRow = RowOf<'setup-inspect'>;

const CREATE_TABLE = /CREATE TABLE\s+(?:IF NOT EXISTS\s+)?"[^"]+"\."([^"]+)"/g;

/** Every table name the migrations create (relaybus_events, ..., relaybus_migrations). */
export function relaybusTableNames(migrations: readonly Migration[]): string[] {
  const names = new Set<string>();
  for (const statement of migrations.flatMap((m) => m.statements)) {
    for (const match of statement.matchAll(CREATE_TABLE)) names.add(match[1]!);
  }
  return [...names].sort();
}

const list = (names: readonly string[]): string => names.join(', ');

/**
 * Read the layout of `schema`; throws `SchemaMismatchError` (not retryable) for a layout setup()
 * must not touch. Runs catalog queries and, when the migrations table exists, reads it.
 */
export async function inspectLayout(
  executor: SqlExecutor,
  statements: Statements,
  schema: string,
  migrations: readonly Migration[],
): Promise<Layout> {
  const [row] = await executor.run<InspectRow>(statements['setup-inspect'], [schema, relaybusTableNames(migrations)]);
  const state = row!;
  const readApplied = async () =>
    (await executor.run<RowOf<'setup-applied'>>(statements['setup-applied'], [])).map((r) => r.name);
  if (state.row_lease) {
    // The 0.1 upgrade creates the migrations table early (empty) and records 0000_init when it is done.
    const applied = state.migrations_table ? await readApplied() : [];
    if (applied.length > 0) {
      throw new SchemaMismatchError(
        `Schema "${schema}" has both the row-lease deliveries of relaybus 0.1 (column lease_token) and recorded relaybus migrations (${list(applied)}): ` +
          'a layout no relaybus version writes. setup() changed nothing; restore the schema from a backup or point relaybus at another schema.',
      );
    }
    if (!state.tables.includes('relaybus_events')) {
      throw new SchemaMismatchError(
        `Schema "${schema}" has a relaybus_deliveries table with a lease_token column but no relaybus_events table: not the layout of relaybus 0.1. setup() changed nothing.`,
      );
    }
    return { kind: 'row-lease', applied };
  }
  if (!state.migrations_table) {
    if (state.tables.length === 0) return { kind: 'empty', schemaExists: state.schema_exists };
    throw new SchemaMismatchError(
      `Schema "${schema}" already has tables named like relaybus's (${list(state.tables)}) but no relaybus_migrations table, so they were not ` +
        "created by relaybus setup() (another application's tables, or a copy made by hand), and they are not the 0.1 layout either (no lease_token column). " +
        'setup() changed nothing. Use another schema for relaybus (the schema option, --schema on the command line), or move those tables away.',
    );
  }
  const applied = await readApplied();
  if (applied.length === 0) {
    throw new SchemaMismatchError(
      `Schema "${schema}" has relaybus tables (${list(state.tables)}) but its relaybus_migrations table records no migration, so setup() cannot tell ` +
        'which version they are. If drizzle-kit created them, apply the supplement too (relaybus sql --supplement, or createPostgresSupplementSql()), ' +
        'which records the migrations the tables match. setup() changed nothing.',
    );
  }
  const known = new Set(migrations.map((m) => m.name));
  const unknown = applied.filter((name) => !known.has(name));
  if (unknown.length > 0) {
    throw new SchemaMismatchError(
      `Schema "${schema}" was set up by a newer relaybus: it records migration${unknown.length === 1 ? '' : 's'} ${list(unknown)}, which this version ` +
        `does not know (it knows ${list(migrations.map((m) => m.name))}). setup() never downgrades a schema and changed nothing: run the relaybus ` +
        'version that wrote it (or newer), or restore a backup taken before that upgrade.',
    );
  }
  return { kind: 'relaybus', applied };
}
