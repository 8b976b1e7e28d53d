import { SchemaMismatchError } from '../../core/errors.js';
import type { RowOf } from '../rows.js';
import type { Migration } from '../schema-sql.js';
import type { SqlExecutor } from '../sql-client.js';
import type { Statements } from '../statements.js';

/**
 * What the 0.1 upgrade needs of a schema before it changes anything, checked by the dry run and by
 * every transaction of the upgrade (before its first statement that writes): the two 0.1 tables with
 * every column the upgrade reads or alters, of the type the upgraded layout keeps; the columns and
 * tables an interrupted run already added, of the types it adds them with; and no row the final
 * step's checks would refuse. The expected columns come from the target migration itself (0000_init
 * creates events and deliveries as the upgrade leaves them), so this list cannot drift from the
 * layout the upgrade produces: a 0.1 table has the target's columns, minus the ones the upgrade adds,
 * plus the lease columns it drops at the end.
 */

/** The columns only relaybus 0.1 has: the upgrade reads them (leases, completion times), then drops them. */
const ROW_LEASE_ONLY: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  relaybus_deliveries: {
    lease_owner: 'text',
    lease_token: 'text',
    lease_expires_at: 'timestamp with time zone',
    completed_at: 'timestamp with time zone',
  },
};

/** The columns the upgrade adds to the 0.1 tables (present, with the target's type, after an interrupted run). */
const ADDED: Readonly<Record<string, readonly string[]>> = {
  relaybus_events: ['handlers'],
  relaybus_deliveries: ['lane', 'claims'],
};

/** The 0.1 tables: they must exist. The target's other tables are created where missing. */
const ROW_LEASE_TABLES = Object.keys(ADDED);

const CREATE_TABLE = /^CREATE TABLE(?: IF NOT EXISTS)? "[^"]+"\."([^"]+)" \(/;
const COLUMN_LINE = /^\s*"([^"]+)" ([a-z][a-z ]*(?:\[\])?)/;

/** The columns (name -> type as format_type writes it) of each table `migration` creates. */
export function migrationColumns(migration: Migration): Map<string, Map<string, string>> {
  const tables = new Map<string, Map<string, string>>();
  for (const statement of migration.statements) {
    const table = CREATE_TABLE.exec(statement)?.[1];
    if (table === undefined) continue;
    const columns = new Map<string, string>();
    for (const line of statement.split('\n').slice(1)) {
      const match = COLUMN_LINE.exec(line);
      if (match) columns.set(match[1]!, match[2]!.trim());
    }
    tables.set(table, columns);
  }
  return tables;
}

/** The expected layout: for each table, whether it must exist, its required columns, and its optional ones. */
interface Expected {
  readonly required: boolean;
  readonly columns: ReadonlyMap<string, string>;
  /** Columns that may be absent (the upgrade adds them); when present they must have their type. */
  readonly optional: ReadonlyMap<string, string>;
}

export function expectedRowLeaseLayout(target: Migration): Map<string, Expected> {
  const expected = new Map<string, Expected>();
  for (const [table, columns] of migrationColumns(target)) {
    const added = ADDED[table];
    if (added === undefined) {
      expected.set(table, { required: false, columns, optional: new Map() });
      continue;
    }
    const required = new Map([...columns].filter(([name]) => !added.includes(name)));
    for (const [name, type] of Object.entries(ROW_LEASE_ONLY[table] ?? {})) required.set(name, type);
    expected.set(table, {
      required: true,
      columns: required,
      optional: new Map([...columns].filter(([name]) => added.includes(name))),
    });
  }
  for (const table of ROW_LEASE_TABLES)
    if (!expected.has(table)) throw new Error(`relaybus: ${target.name} creates no ${table}; the 0.1 upgrade needs it`);
  return expected;
}

/** One expected column, flat: for the one-script form (`script.ts`), which checks the same layout in plpgsql. */
export interface ExpectedColumn {
  readonly table: string;
  readonly column: string;
  readonly type: string;
  /** The table must exist (a 0.1 table); else the column is checked only where the table exists. */
  readonly tableRequired: boolean;
  /** The column must exist where the table does; else (a column the upgrade adds) only its type is checked. */
  readonly columnRequired: boolean;
}

export function expectedRowLeaseColumns(target: Migration): ExpectedColumn[] {
  return [...expectedRowLeaseLayout(target)].flatMap(([table, want]) => [
    ...[...want.columns].map(([column, type]) => ({
      table,
      column,
      type,
      tableRequired: want.required,
      columnRequired: true,
    })),
    ...[...want.optional].map(([column, type]) => ({
      table,
      column,
      type,
      tableRequired: want.required,
      columnRequired: false,
    })),
  ]);
}

const KINDS: Readonly<Record<string, string>> = {
  v: 'a view',
  m: 'a materialized view',
  f: 'a foreign table',
  i: 'an index',
  S: 'a sequence',
  c: 'a composite type',
};

/** What the catalog of `schema` lacks for the upgrade to `target`, one line per problem (empty: nothing). */
export async function rowLeaseLayoutProblems(
  executor: SqlExecutor,
  statements: Statements,
  schema: string,
  target: Migration,
): Promise<string[]> {
  const expected = expectedRowLeaseLayout(target);
  const rows = await executor.run<RowOf<'upgrade-row-lease-catalog'>>(statements['upgrade-row-lease-catalog'], [
    schema,
    [...expected.keys()],
  ]);
  const found = new Map<string, { kind: string; columns: Map<string, string> }>();
  for (const row of rows) {
    const table = found.get(row.table_name) ?? { kind: row.kind, columns: new Map<string, string>() };
    if (row.column_name !== null) table.columns.set(row.column_name, row.column_type ?? '');
    found.set(row.table_name, table);
  }
  const problems: string[] = [];
  for (const [table, want] of expected) {
    const have = found.get(table);
    if (have === undefined) {
      if (want.required) problems.push(`table ${table} is missing`);
      continue;
    }
    if (have.kind !== 'r' && have.kind !== 'p') {
      problems.push(`${table} is ${KINDS[have.kind] ?? `a relation of kind ${have.kind}`}, not a table`);
      continue;
    }
    for (const [column, type] of want.columns) {
      const actual = have.columns.get(column);
      if (actual === undefined) problems.push(`column ${table}.${column} (${type}) is missing`);
      else if (actual !== type) problems.push(`column ${table}.${column} is ${actual}, expected ${type}`);
    }
    for (const [column, type] of want.optional) {
      const actual = have.columns.get(column);
      if (actual !== undefined && actual !== type)
        problems.push(`column ${table}.${column} is ${actual}, expected ${type} (the upgrade adds it so)`);
    }
  }
  return problems;
}

/** The 0.1 schema lacks what the upgrade needs: refused before the first change. `problems` lists each lack. */
export class UpgradePreconditionError extends SchemaMismatchError {
  readonly problems: readonly string[];
  constructor(schema: string, problems: readonly string[], state: string) {
    super(
      `Schema "${schema}" has the layout of relaybus 0.1 (deliveries.lease_token) but not everything the upgrade reads: ` +
        `${problems.join('; ')}. ${state} Give the tables what is missing (add or rename the column back, convert ` +
        'the type, fix the rows), then run the upgrade again (relaybus upgrade, or setup()); relaybus upgrade --dry-run checks it first.',
    );
    this.problems = problems;
  }
}

/** What the final step's checks would refuse, from the plan's counts (`upgrade-row-lease-plan`). */
export function rowLeaseDataProblems(counts: { readonly unfit: number }): string[] {
  if (counts.unfit === 0) return [];
  return [
    `${counts.unfit} deliver${counts.unfit === 1 ? 'y' : 'ies'} not completed ha${counts.unfit === 1 ? 's' : 've'} attempts < 0 or ` +
      'max_attempts < 1, which the upgraded layout refuses (set attempts to at least 0 and max_attempts to at least 1)',
  ];
}

/** The sentence of a refusal when nothing was changed yet. */
export const NOTHING_CHANGED = 'The upgrade changed nothing: it checks this before its first change.';

/**
 * Throw `UpgradePreconditionError` when the catalog of `schema` lacks what the upgrade needs. `state` says what
 * the upgrade had done by then (`NOTHING_CHANGED` on the first check).
 */
export async function assertRowLeaseLayout(
  executor: SqlExecutor,
  statements: Statements,
  schema: string,
  target: Migration,
  state = NOTHING_CHANGED,
): Promise<void> {
  const problems = await rowLeaseLayoutProblems(executor, statements, schema, target);
  if (problems.length > 0) throw new UpgradePreconditionError(schema, problems, state);
}
