import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { packageFile } from './package-files.js';
import type { SqlStatement } from './sql-client.js';

/**
 * Loads the hot statements from `sql/` once, substitutes the schema marker and names each statement
 * `relaybus_<file_snake>_<8-char schema hash>`, so one connection can serve two schemas with named
 * prepared statements. The files ship in the package's `sql/` folder.
 */
export const STATEMENT_NAMES = [
  'acquire-lanes',
  'bury',
  'claim-held-lanes',
  'claim-light',
  'complete-many',
  'complete-one',
  'extend-lease',
  'forget-in-flight',
  'list-deliveries',
  'publish',
  'publish-guard',
  'publish-new',
  'publish-new-one',
  'publish-probe',
  'publish-undo',
  'purge-expired',
  'release',
  'list-lanes',
  'list-subscriptions',
  'relinquish',
  'requeue',
  'reschedule',
  'setup-applied',
  'setup-inspect',
  'setup-lock',
  'setup-record',
  'statistics',
  'subscribe',
  'unsubscribe',
  'upgrade-drop-lane-function',
  'upgrade-lane-function',
  'upgrade-row-lease-catalog',
  'upgrade-row-lease-convert',
  'upgrade-row-lease-deliveries-columns',
  'upgrade-row-lease-deliveries-layout',
  'upgrade-row-lease-drop-indexes',
  'upgrade-row-lease-events-columns',
  'upgrade-row-lease-events-handlers',
  'upgrade-row-lease-events-layout',
  'upgrade-row-lease-key-sequences',
  'upgrade-row-lease-leases',
  'upgrade-row-lease-lock',
  'upgrade-row-lease-plan',
  'upgrade-row-lease-release',
  'upgrade-row-lease-rename-unique',
] as const;

export type StatementName = (typeof STATEMENT_NAMES)[number];
export type Statements = Readonly<Record<StatementName, SqlStatement>>;

const SCHEMA_MARKER = /\/\*schema\*\//g;
const rawTexts = new Map<StatementName, string>();

const INCLUDE_MARKER = /\/\*include ([a-z-]+)\*\//g;

/** A fragment file of `sql/fragments/`, as stored (its header comment included). */
function readFragmentFile(name: string): string {
  return readFileSync(packageFile(`sql/fragments/${name}.sql`), 'utf8');
}

/** `raw` with each `/*include name*\/` replaced by that fragment without its header comment: CTEs two statements share. */
function spliceFragments(raw: string, readFragment: (name: string) => string): string {
  return raw.replace(INCLUDE_MARKER, (_, name: string) =>
    readFragment(name)
      .split('\n')
      .filter((line) => !line.startsWith('--'))
      .join('\n')
      .trim(),
  );
}

function rawText(name: StatementName): string {
  let text = rawTexts.get(name);
  if (text === undefined) {
    text = spliceFragments(readFileSync(packageFile(`sql/${name}.sql`), 'utf8'), readFragmentFile);
    rawTexts.set(name, text);
  }
  return text;
}

/**
 * A statement file's text as the store sends it: fragments spliced in, every table prefixed with the schema. For tools
 * that render another version of a statement (bench/claim-compare.ts reads one from a git revision).
 */
export function renderStatement(
  file: string,
  schema: string,
  readFragment: (name: string) => string = readFragmentFile,
): string {
  return spliceFragments(file, readFragment).replace(SCHEMA_MARKER, `${quoteIdentifier(schema)}.`);
}

/** `"schema".` for a valid identifier; identifiers are validated by the store's options first. */
export function quoteIdentifier(identifier: string): string {
  return `"${identifier.replaceAll('"', '""')}"`;
}

/** Every statement, rendered for one schema. */
export function loadStatements(schema: string): Statements {
  const hash = createHash('sha256').update(schema).digest('hex').slice(0, 8);
  const prefix = `${quoteIdentifier(schema)}.`;
  const entries = STATEMENT_NAMES.map((name) => [
    name,
    { name: `relaybus_${name.replaceAll('-', '_')}_${hash}`, text: rawText(name).replace(SCHEMA_MARKER, prefix) },
  ]);
  return Object.freeze(Object.fromEntries(entries)) as Statements;
}
