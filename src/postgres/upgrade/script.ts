import type { Migration } from '../schema-sql.js';
import { isStatementName, quoteIdentifier, type Statements, statementPath } from '../statements.js';
import { relaybusTableNames } from './layout.js';
import { expectedRowLeaseColumns } from './preconditions.js';
import { finishLayoutSteps, prepareSteps, type RowLeaseStep } from './row-lease.js';

/**
 * The relaybus DDL as one script that brings any schema setup() would accept to the latest layout:
 * an empty one, one at an earlier relaybus version, or the row-lease layout of relaybus 0.1 (done
 * in one go, with no batches: apply it in one transaction with the workers stopped). Each part is
 * a `DO` block that runs only where needed, built from the same statements setup() runs: the
 * refusals (a newer relaybus, foreign tables under relaybus's names), the 0.1 upgrade, then each
 * migration unless recorded (recording it), then the supplement.
 */

const BLOCK = '$relaybus$';
const STEP = '$relaybus_step$';

function literal(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

/** `EXECUTE` of one statement; a statement of `sql/` without its header, named in a comment instead. */
function execute(statement: string, using = ''): string {
  if (statement.includes(STEP) || statement.includes(BLOCK))
    throw new Error(`relaybus: a statement contains ${STEP} or ${BLOCK}`);
  const lines = statement.trim().split('\n');
  const header = lines.findIndex((line) => !line.startsWith('--'));
  const name = header > 0 ? /^-- ([a-z-]+):/.exec(lines[0]!)?.[1] : undefined;
  const title = name !== undefined && isStatementName(name) ? `  -- ${statementPath(name)}\n` : '';
  return `${title}  EXECUTE ${STEP}\n${lines.slice(Math.max(header, 0)).join('\n')}\n${STEP}${using};`;
}

function block(declare: readonly string[], body: readonly string[]): string {
  return [
    `DO ${BLOCK}`,
    ...(declare.length > 0 ? ['DECLARE', ...declare] : []),
    'BEGIN',
    ...body,
    'END',
    `${BLOCK};`,
  ].join('\n');
}

/** `to_regclass('"schema".table')`, as a plpgsql expression. */
function regclass(schema: string, table: string): string {
  return `to_regclass(${literal(`${quoteIdentifier(schema)}.${table}`)})`;
}

function rowLeaseMarker(schema: string): string {
  return (
    `EXISTS (SELECT 1 FROM pg_catalog.pg_attribute WHERE attrelid = ${regclass(schema, 'relaybus_deliveries')} ` +
    "AND attname = 'lease_token' AND NOT attisdropped)"
  );
}

function guard(schema: string, migrations: readonly Migration[]): string {
  const names = migrations.map((m) => literal(m.name)).join(', ');
  const tables = relaybusTableNames(migrations).map(literal).join(', ');
  const q = quoteIdentifier(schema);
  return block(
    [],
    [
      `  IF ${regclass(schema, 'relaybus_migrations')} IS NOT NULL THEN`,
      `    IF EXISTS (SELECT 1 FROM ${q}.relaybus_migrations WHERE name <> ALL (ARRAY[${names}]::text[])) THEN`,
      `      RAISE EXCEPTION ${literal(`relaybus: schema "${schema}" was set up by a newer relaybus: it records migrations this script does not know (it knows ${migrations.map((m) => m.name).join(', ')}); nothing was changed`)};`,
      '    END IF;',
      `  ELSIF NOT ${rowLeaseMarker(schema)} AND EXISTS (SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace`,
      `      WHERE n.nspname = ${literal(schema)} AND c.relname = ANY (ARRAY[${tables}]::text[])) THEN`,
      `    RAISE EXCEPTION ${literal(`relaybus: schema "${schema}" has tables named like relaybus's but no relaybus_migrations table (another application's tables?); use another schema; nothing was changed`)};`,
      '  END IF;',
    ],
  );
}

function steps(statements: Statements, list: readonly RowLeaseStep[]): string[] {
  return list.flatMap((step) =>
    step.kind === 'ddl' ? [execute(statements[step.name].text)] : step.statements.map((s) => execute(s)),
  );
}

/**
 * The layout check of `preconditions.ts` in plpgsql: every column the upgrade reads, of the type the upgraded layout
 * keeps, listed in one exception before the first change (the same expected columns, from the target migration).
 */
function layoutCheck(schema: string, target: Migration): string[] {
  const rows = expectedRowLeaseColumns(target).map(
    (c) => `(${literal(c.table)}, ${literal(c.column)}, ${literal(c.type)}, ${c.tableRequired}, ${c.columnRequired})`,
  );
  const relation = `to_regclass(format('%I.%I', ${literal(schema)}, w.tbl))`;
  return [
    "  SELECT string_agg(CASE WHEN a.attname IS NULL THEN format('column %s.%s (%s) is missing', w.tbl, w.col, w.typ)",
    "                         ELSE format('column %s.%s is %s, expected %s', w.tbl, w.col, format_type(a.atttypid, a.atttypmod), w.typ) END,",
    "                    '; ' ORDER BY w.tbl, w.col)",
    '    INTO problems',
    `    FROM (VALUES ${rows.join(',\n      ')}) AS w(tbl, col, typ, table_required, column_required)`,
    `    LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = ${relation} AND a.attname = w.col AND a.attnum > 0 AND NOT a.attisdropped`,
    `    WHERE (w.table_required OR ${relation} IS NOT NULL)`,
    '      AND CASE WHEN a.attname IS NULL THEN w.column_required ELSE format_type(a.atttypid, a.atttypmod) <> w.typ END;',
    '  IF problems IS NOT NULL THEN',
    `    RAISE EXCEPTION ${literal(`relaybus: schema "${schema}" has the layout of relaybus 0.1 (deliveries.lease_token) but not everything the upgrade reads: %; nothing was changed (give the tables what is missing, then run this script again)`)}, problems;`,
    '  END IF;',
  ];
}

function rowLease(schema: string, statements: Statements, target: Migration): string {
  const q = quoteIdentifier(schema);
  return block(
    ['  leased integer;', '  owners text[];', '  until timestamptz;', '  problems text;'],
    [
      `  IF NOT ${rowLeaseMarker(schema)} THEN`,
      '    RETURN;',
      '  END IF;',
      ...layoutCheck(schema, target),
      execute(statements['upgrade-row-lease-lock'].text),
      execute(statements['upgrade-row-lease-leases'].text, ' INTO leased, owners, until USING NULL::timestamptz'),
      '  IF leased > 0 THEN',
      `    RAISE EXCEPTION ${literal(`relaybus: schema "${schema}" has the layout of relaybus 0.1 and its workers hold leases on % deliveries (%), the last until %: stop every relaybus 0.1 worker first, then run this script again; nothing was changed`)},`,
      "      leased, array_to_string(owners, ', '), until;",
      '  END IF;',
      ...steps(statements, prepareSteps(target)),
      execute(statements['upgrade-row-lease-convert'].text, ' USING NULL::bigint, NULL::int'),
      execute(statements['upgrade-row-lease-release'].text, ' USING NULL::timestamptz'),
      execute(statements['upgrade-row-lease-events-handlers'].text),
      ...steps(statements, finishLayoutSteps(target)),
      execute(statements['upgrade-row-lease-key-sequences'].text),
      execute(statements['upgrade-drop-lane-function'].text),
      execute(
        `INSERT INTO ${q}.relaybus_migrations (name) VALUES (${literal(target.name)}) ON CONFLICT (name) DO NOTHING`,
      ),
    ],
  );
}

function migration(schema: string, m: Migration): string {
  const q = quoteIdentifier(schema);
  return block(
    [],
    [
      `  IF ${regclass(schema, 'relaybus_migrations')} IS NOT NULL THEN`,
      `    IF EXISTS (SELECT 1 FROM ${q}.relaybus_migrations WHERE name = ${literal(m.name)}) THEN`,
      '      RETURN;',
      '    END IF;',
      '  END IF;',
      ...m.statements.map((statement) => execute(statement)),
      execute(`INSERT INTO ${q}.relaybus_migrations (name) VALUES (${literal(m.name)}) ON CONFLICT (name) DO NOTHING`),
    ],
  );
}

/** The parts of the script, in order: guard, 0.1 upgrade, one block per migration, then the supplement statements. */
export function schemaScriptParts(
  schema: string,
  statements: Statements,
  migrations: readonly Migration[],
  supplement: readonly string[],
): string[] {
  return [
    `-- refuse a schema of a newer relaybus, or foreign tables under relaybus's names\n${guard(schema, migrations)}`,
    `-- the row-lease layout of relaybus 0.1 (deliveries.lease_token): upgraded in place to ${migrations[0]!.name}\n${rowLease(schema, statements, migrations[0]!)}`,
    ...migrations.map((m) => `-- migration ${m.name}, unless recorded\n${migration(schema, m)}`),
    ...supplement.map((statement) => (statement.endsWith(';') ? statement : `${statement};`)),
  ];
}
