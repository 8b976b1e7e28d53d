import { readFileSync } from 'node:fs';
import { InvalidOptionsError } from '../core/errors.js';
import { packageFile } from './package-files.js';
import { loadStatements, quoteIdentifier } from './statements.js';
import { schemaScriptParts } from './upgrade/script.js';

/**
 * The DDL of the relaybus tables, rendered for a schema name: the drizzle-kit migrations generated
 * from `schema/postgres.ts` (in journal order), then the supplement (storage parameters, lane rows).
 */

/** The default Postgres schema of the relaybus tables. */
export const DEFAULT_SCHEMA = 'relaybus';

const IDENTIFIER = /^[a-z_][a-z0-9_]{0,62}$/;

/** Throws `InvalidOptionsError` unless `schema` is a plain lower-case identifier. */
export function assertSchemaName(schema: unknown): asserts schema is string {
  if (typeof schema !== 'string' || !IDENTIFIER.test(schema)) {
    throw new InvalidOptionsError(
      `schema must be a lower-case Postgres identifier (letters, digits, underscores; at most 63 characters), got ${JSON.stringify(schema)}.`,
    );
  }
}

export interface Migration {
  readonly name: string;
  readonly statements: readonly string[];
}

const BREAKPOINT = /-->\s*statement-breakpoint/;

function renderForSchema(sqlText: string, schema: string): string[] {
  const quoted = quoteIdentifier(schema);
  return sqlText
    .split(BREAKPOINT)
    .map((statement) =>
      statement
        .replace(/CREATE SCHEMA "relaybus"/g, `CREATE SCHEMA IF NOT EXISTS ${quoted}`)
        .replace(/"relaybus"\./g, `${quoted}.`)
        .trim(),
    )
    .filter((statement) => statement.replace(/--.*$/gm, '').trim().length > 0);
}

/** The migrations of `schema/migrations/`, in order, rendered for `schema`. */
export function loadMigrations(schema: string = DEFAULT_SCHEMA): Migration[] {
  assertSchemaName(schema);
  const journal = JSON.parse(readFileSync(packageFile('schema/migrations/meta/_journal.json'), 'utf8')) as {
    entries: { idx: number; tag: string }[];
  };
  return [...journal.entries]
    .sort((a, b) => a.idx - b.idx)
    .map(({ tag }) => ({
      name: tag,
      statements: renderForSchema(readFileSync(packageFile(`schema/migrations/${tag}.sql`), 'utf8'), schema),
    }));
}

/** What drizzle-kit cannot express (storage parameters, the 256 lane rows), rendered for `schema`; idempotent. */
export function loadSupplement(schema: string = DEFAULT_SCHEMA): string[] {
  assertSchemaName(schema);
  return renderForSchema(readFileSync(packageFile('schema/postgres-supplement.sql'), 'utf8'), schema);
}

function asScript(statements: readonly string[]): string {
  return statements.map((statement) => (statement.endsWith(';') ? statement : `${statement};`)).join('\n\n');
}

/**
 * The whole relaybus DDL as one script, for teams that apply schema changes with their own tooling
 * (then start the bus with `setupStore: false`). It takes any schema setup() accepts to the latest
 * layout: an empty one, one at an earlier relaybus version (each migration runs unless the schema
 * records it), or the row-lease layout of relaybus 0.1 (converted in one go: apply the script in
 * one transaction with the workers stopped). A schema of a newer relaybus makes it fail, changing
 * nothing.
 *
 * ```ts
 * import { createPostgresSchemaSql } from 'relaybus/postgres';
 * await fs.writeFile('relaybus.sql', createPostgresSchemaSql({ schema: 'relaybus' }));
 * ```
 */
export function createPostgresSchemaSql(options: { schema?: string } = {}): string {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const migrations = loadMigrations(schema);
  const parts = schemaScriptParts(schema, loadStatements(schema), migrations, loadSupplement(schema));
  return (
    `-- relaybus schema "${schema}": migrations ${migrations.map((m) => m.name).join(', ')} (each unless recorded), the upgrade ` +
    'of a relaybus 0.1 layout, and the supplement. Re-runnable; apply it in one transaction (psql -1).\n' +
    `${parts.join('\n\n')}\n`
  );
}

/** Join statements into one script (used by setup). */
export { asScript };
