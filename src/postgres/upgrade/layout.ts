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
        `Schema "${schema}" mixes relaybus 0.1 (column lease_token) with recorded migrations (${list(applied)}), a layout no version writes. ` +
          'Restore it from a backup or use another schema; nothing was changed.',
      );
    }
    if (!state.tables.includes('relaybus_events')) {
      throw new SchemaMismatchError(
        `Schema "${schema}" has relaybus_deliveries.lease_token but no relaybus_events: not relaybus 0.1. Use another schema; nothing was changed.`,
      );
    }
    return { kind: 'row-lease', applied };
  }
  if (!state.migrations_table) {
    if (state.tables.length === 0) return { kind: 'empty', schemaExists: state.schema_exists };
    throw new SchemaMismatchError(
      `Schema "${schema}" has tables named like relaybus's (${list(state.tables)}) that relaybus did not create (no relaybus_migrations table). ` +
        'Use another schema (the schema option, --schema) or move them away; nothing was changed.',
    );
  }
  const applied = await readApplied();
  if (applied.length === 0) {
    throw new SchemaMismatchError(
      `Schema "${schema}" has relaybus tables (${list(state.tables)}) but records no migration, so their version is unknown. ` +
        'If drizzle-kit created them, apply relaybus sql --supplement too; nothing was changed.',
    );
  }
  const known = new Set(migrations.map((m) => m.name));
  const unknown = applied.filter((name) => !known.has(name));
  if (unknown.length > 0) {
    throw new SchemaMismatchError(
      `Schema "${schema}" was set up by a newer relaybus (migration${unknown.length === 1 ? '' : 's'} ${list(unknown)}; this version knows up ` +
        `to ${migrations.at(-1)!.name}). Run that relaybus version or newer; setup() never downgrades, and nothing was changed.`,
    );
  }
  return { kind: 'relaybus', applied };
}
