/**
 * The row types of src/postgres/rows.ts against Postgres. Every statement of `sql/` is described by
 * the server without being run (Parse + Describe, postgres.js `describe()`), and its result columns
 * must be exactly those rows.ts declares: names, Postgres types and order. A statement that returns
 * rows must be declared there, and one that returns none must be listed in NO_ROWS, so no statement
 * escapes the check. The row types the store reads are computed from those declarations, so a column
 * renamed, dropped, added or retyped in SQL fails here instead of drifting from its TypeScript type.
 *
 * Columns compare in order: a row is read by name, so order itself is harmless, but a list keeps two
 * columns of the same name apart (a driver keeps only the last of them, which an object keyed by
 * name would hide), and rows.ts stays in the order of each SELECT.
 *
 * Also: each Postgres type rows.ts uses comes back through every driver adapter as the value the
 * row types say (`PgValues`).
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { PGlite } from '@electric-sql/pglite';
import pg from 'pg';
import postgres from 'postgres';
import { fromPg, fromPglite, fromPostgresJs, postgresStore } from '../../src/postgres/index.js';
import { loadMigrations } from '../../src/postgres/schema-sql.js';
import { NO_ROWS, ROW_COLUMNS, type PgTypeName } from '../../src/postgres/rows.js';
import type { SqlExecutor } from '../../src/postgres/sql-client.js';
import {
  loadStatements,
  STATEMENT_NAMES,
  type StatementName,
  type Statements,
  statementPath,
} from '../../src/postgres/statements.js';
import { prepareRowLease } from '../../src/postgres/upgrade/row-lease.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { rowLeaseLayout } from '../support/upgrades.js';

const found = await findPostgres();
const skip = 'skip' in found ? found.skip : undefined;
const url = 'url' in found ? found.url : '';

const declared = (name: StatementName): readonly (readonly [string, string])[] | undefined => {
  const columns = (ROW_COLUMNS as Partial<Record<StatementName, Readonly<Record<string, string>>>>)[name];
  return columns === undefined ? undefined : Object.entries(columns);
};
const returnsNothing = (name: StatementName): boolean => (NO_ROWS as readonly StatementName[]).includes(name);

describe('row types: every statement of sql/ returns the columns src/postgres/rows.ts declares', { skip }, () => {
  const schema = uniqueSchemaName('row_types');
  const oldSchema = uniqueSchemaName('row_types_0_1');
  let pool: pg.Pool;
  let sql: postgres.Sql;
  let current: Statements;
  let upgrade: Statements;
  let typeNames: Map<number, string>;

  before(async () => {
    pool = new pg.Pool({ connectionString: url, max: 2 });
    await postgresStore({ driver: fromPg(pool), schema }).setup();
    // The upgrade statements read the 0.1 layout (lease columns) and write the new tables: they are described in the
    // state setup() runs them in, a 0.1 schema after the prepare step.
    await pool.query(rowLeaseLayout(oldSchema));
    upgrade = loadStatements(oldSchema);
    await prepareRowLease(fromPg(pool).executor, upgrade, loadMigrations(oldSchema)[0]!);
    current = loadStatements(schema);
    sql = postgres(url, { max: 1, onnotice: () => {} });
    const types = await sql<
      { oid: number; typname: string }[]
    >`SELECT oid::int AS oid, typname FROM pg_catalog.pg_type`;
    typeNames = new Map(types.map((t) => [t.oid, t.typname]));
  });

  after(async () => {
    await sql?.end();
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.query(`DROP SCHEMA IF EXISTS "${oldSchema}" CASCADE`);
    await pool?.end();
  });

  /** The result columns Postgres reports for a statement, without running it. */
  async function describeColumns(name: StatementName): Promise<[string, string][]> {
    const text = (name.startsWith('upgrade-') ? upgrade : current)[name].text;
    const { columns } = await sql.unsafe(text).describe();
    return columns.map((column) => [column.name, typeNames.get(column.type) ?? `oid ${column.type}`]);
  }

  for (const name of STATEMENT_NAMES) {
    it(name, async () => {
      const described = await describeColumns(name);
      const expected = declared(name);
      if (expected === undefined) {
        assert.ok(
          returnsNothing(name),
          `${statementPath(name)} is neither in ROW_COLUMNS nor in NO_ROWS of src/postgres/rows.ts`,
        );
        assert.deepEqual(
          described,
          [],
          `${statementPath(name)} returns rows (${described.map(([c, t]) => `${c} ${t}`).join(', ')}) but rows.ts lists it in NO_ROWS: describe its columns in ROW_COLUMNS`,
        );
        return;
      }
      assert.ok(!returnsNothing(name), `${statementPath(name)} is both in ROW_COLUMNS and in NO_ROWS`);
      assert.ok(
        described.length > 0,
        `${statementPath(name)} returns no rows, but rows.ts describes columns for it: move it to NO_ROWS`,
      );
      assert.deepEqual(
        described,
        expected,
        `the columns of ${statementPath(name)} (actual) differ from ROW_COLUMNS['${name}'] in src/postgres/rows.ts (expected)`,
      );
    });
  }

  it('describes what Postgres describes: a column added to a statement is reported', async () => {
    // Guards the check itself: the describe must see the statement's real result, not a cached or empty one.
    const text = `${current['extend-lease'].text}, l.epoch`;
    const { columns } = await sql.unsafe(text).describe();
    assert.deepEqual(
      columns.map((c) => [c.name, typeNames.get(c.type)]),
      [
        ['lane', 'int2'],
        ['epoch', 'int8'],
      ],
    );
  });
});

/**
 * Per Postgres type: an expression of that type, and whether a value is what `PgValues` says the drivers hand back
 * (keyed by every PgTypeName, so a new type in rows.ts needs its check here).
 */
const VALUE_CHECKS: Readonly<
  Record<PgTypeName, { readonly expression: string; readonly holds: (value: unknown) => boolean }>
> = {
  bool: { expression: 'true', holds: (v) => v === true },
  int2: { expression: '7::int2', holds: (v) => v === 7 },
  int4: { expression: '7::int4', holds: (v) => v === 7 },
  int8: { expression: '7::int8', holds: (v) => v === '7' || v === 7 },
  float8: { expression: '1714979289123::float8', holds: (v) => v === 1714979289123 },
  text: { expression: `'x'::text`, holds: (v) => v === 'x' },
  jsonb: { expression: `'{"a":[1]}'::jsonb`, holds: (v) => JSON.stringify(v) === '{"a":[1]}' },
  timestamptz: {
    expression: `'2024-05-06T07:08:09.123Z'::timestamptz`,
    holds: (v) => v instanceof Date && v.toISOString() === '2024-05-06T07:08:09.123Z',
  },
  // No NULL element: postgres.js 3.4 hands one back as the string 'NULL' (no text[] relaybus reads holds NULLs).
  _text: {
    expression: `ARRAY['a', 'c,d', '']::text[]`,
    holds: (v) => Array.isArray(v) && JSON.stringify(v) === '["a","c,d",""]',
  },
};

const usedTypes = [
  ...new Set(Object.values(ROW_COLUMNS).flatMap((columns) => Object.values(columns) as string[])),
].sort();

describe('row types: each Postgres type rows.ts uses comes back through the drivers as PgValues says', { skip }, () => {
  const opened: { name: string; executor: SqlExecutor; close: () => Promise<void> }[] = [];

  before(async () => {
    const pool = new pg.Pool({ connectionString: url, max: 1 });
    const client = postgres(url, { max: 1, onnotice: () => {} });
    const lite = new PGlite();
    opened.push(
      { name: 'pg', executor: fromPg(pool).executor, close: () => pool.end() },
      { name: 'postgres.js', executor: fromPostgresJs(client).executor, close: () => client.end() },
      { name: 'PGlite', executor: fromPglite(lite).executor, close: () => lite.close() },
    );
  });

  after(async () => {
    for (const { close } of opened) await close();
  });

  it('every type in ROW_COLUMNS has a value check', () => {
    assert.deepEqual(
      usedTypes.filter((type) => !(type in VALUE_CHECKS)),
      [],
    );
  });

  it('pg, postgres.js and PGlite hand back each type as PgValues declares', async () => {
    const types = usedTypes.filter((type): type is PgTypeName => type in VALUE_CHECKS);
    const text = `SELECT ${types.map((type) => `${VALUE_CHECKS[type].expression} AS "${type}"`).join(', ')}`;
    for (const { name, executor } of opened) {
      const [row] = await executor.run<Record<string, unknown>>({ name: 'relaybus_row_types_values', text }, []);
      const wrong = types.filter((type) => !VALUE_CHECKS[type].holds(row?.[type]));
      assert.deepEqual(
        wrong.map((type) => [type, row?.[type]]),
        [],
        `${name} hands back these types differently from PgValues in src/postgres/rows.ts`,
      );
    }
  });
});
