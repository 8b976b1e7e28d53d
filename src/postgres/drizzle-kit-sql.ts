import { createHash } from 'node:crypto';
import { DEFAULT_SCHEMA, loadMigrations, loadSupplement, type Migration } from './schema-sql.js';
import { quoteIdentifier } from './statements.js';

/**
 * The two custom migrations a drizzle-kit user puts around the migration drizzle-kit generates for
 * the relaybus tables (scripts, not store statements: they are DO blocks rendered for one schema,
 * as the whole-schema script of upgrade/script.ts is).
 *
 * drizzle-kit's CREATE statements fail on a database where `relaybus setup` already made the
 * tables. So the adopt migration, before them, moves such a schema aside under another name; the
 * supplement, after them, drops the empty copy drizzle-kit made and puts the original back, data
 * and all. drizzle-kit migrate runs every pending migration in one transaction, so no other
 * session ever sees the schema moved. Where setup never ran, both steps do nothing.
 */

const BLOCK = '$relaybus$';

function literal(text: string): string {
  return `'${text.replaceAll("'", "''")}'`;
}

/** Where the adopt migration keeps a setup-made schema until the supplement puts it back (at most 63 characters). */
export function setAsideSchema(schema: string): string {
  return `relaybus_set_aside_${createHash('sha256').update(schema).digest('hex').slice(0, 12)}`;
}

function adoptBlock(schema: string, migrations: readonly Migration[]): string {
  const q = quoteIdentifier(schema);
  const names = migrations.map((m) => literal(m.name)).join(', ');
  return [
    `DO ${BLOCK}`,
    'BEGIN',
    `  IF to_regclass(${literal(`${q}.relaybus_migrations`)}) IS NULL THEN`,
    '    RETURN; -- no relaybus tables yet: drizzle-kit creates them',
    '  END IF;',
    `  IF (SELECT array_agg(name ORDER BY name) FROM ${q}.relaybus_migrations) IS DISTINCT FROM (SELECT array_agg(n ORDER BY n) FROM unnest(ARRAY[${names}]::text[]) AS n) THEN`,
    `    RAISE EXCEPTION ${literal(`relaybus: schema "${schema}" was set up by another relaybus version than the one these migrations were generated with (${migrations.map((m) => m.name).join(', ')}): run npx relaybus setup with this version first, then drizzle-kit migrate again; nothing was changed`)};`,
    '  END IF;',
    `  ALTER SCHEMA ${q} RENAME TO ${quoteIdentifier(setAsideSchema(schema))};`,
    'END',
    `${BLOCK};`,
  ].join('\n');
}

function restoreBlock(schema: string): string {
  const q = quoteIdentifier(schema);
  const aside = setAsideSchema(schema);
  return [
    `DO ${BLOCK}`,
    'BEGIN',
    `  IF to_regnamespace(${literal(aside)}) IS NULL THEN`,
    '    RETURN; -- the adopt migration found no setup-made schema',
    '  END IF;',
    '  -- Only the copy drizzle-kit just created goes: empty, and with no relaybus migration recorded.',
    `  IF to_regclass(${literal(`${q}.relaybus_migrations`)}) IS NULL OR EXISTS (SELECT 1 FROM ${q}.relaybus_migrations)`,
    `     OR EXISTS (SELECT 1 FROM ${q}.relaybus_deliveries) OR EXISTS (SELECT 1 FROM ${q}.relaybus_events) THEN`,
    `    RAISE EXCEPTION ${literal(`relaybus: schema "${aside}" holds the relaybus tables that setup made (the adopt migration moved them there), but "${schema}" is not the empty copy drizzle-kit creates; nothing was changed`)};`,
    '  END IF;',
    `  DROP SCHEMA ${q} CASCADE;`,
    `  ALTER SCHEMA ${quoteIdentifier(aside)} RENAME TO ${q};`,
    'END',
    `${BLOCK};`,
  ].join('\n');
}

function asMigration(statements: readonly string[]): string {
  return `\n${statements.map((statement) => (statement.endsWith(';') ? statement : `${statement};`)).join('\n--> statement-breakpoint\n')}\n`;
}

/**
 * The custom migration that goes before drizzle-kit's own migration of the relaybus tables
 * (`drizzle-kit generate --custom --name relaybus-adopt`, then paste this): where `relaybus setup`
 * already made the schema, at this relaybus version, it is moved aside for the supplement to put
 * back; anywhere else it does nothing. A schema at another version fails it, changing nothing.
 */
export function createPostgresAdoptSql(options: { schema?: string } = {}): string {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const migrations = loadMigrations(schema);
  return asMigration([
    `-- relaybus adopt: a schema "${schema}" that relaybus setup made is moved aside until the relaybus supplement puts it back\n${adoptBlock(schema, migrations)}`,
  ]);
}

/**
 * Everything drizzle-kit cannot express, for a team that puts the relaybus tables into its own
 * drizzle-kit migrations (`drizzle-kit generate --custom`, then paste this): the schema the adopt
 * migration moved aside put back in place of drizzle-kit's empty copy, storage parameters, the lane
 * rows, and the record of the relaybus migrations the tables now match, so a later `setup()` finds
 * nothing to do. Starts with a newline: drizzle-kit's custom file ends on its comment line.
 *
 * ```ts
 * import { createPostgresSupplementSql } from 'relaybus/postgres';
 * fs.appendFileSync('drizzle/0003_relaybus_supplement.sql', createPostgresSupplementSql());
 * ```
 */
export function createPostgresSupplementSql(options: { schema?: string } = {}): string {
  const schema = options.schema ?? DEFAULT_SCHEMA;
  const q = quoteIdentifier(schema);
  const records = loadMigrations(schema).map(
    ({ name }) => `INSERT INTO ${q}.relaybus_migrations (name) VALUES (${literal(name)}) ON CONFLICT (name) DO NOTHING`,
  );
  return asMigration([restoreBlock(schema), ...loadSupplement(schema), ...records]);
}
