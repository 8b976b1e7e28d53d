import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { packageFile } from './package-files.js';
import type { SqlStatement } from './sql-client.js';

/**
 * Loads the statements from `sql/` once, substitutes the schema marker and names each statement
 * `relaybus_<file_snake>_<8-char schema hash>`, so one connection can serve two schemas with named
 * prepared statements. The files ship in the package's `sql/` folder, one folder per job.
 */
export const STATEMENT_FOLDERS = {
  /** What a delivery goes through: publish, claim, complete, extend, reschedule, bury, release, relinquish. */
  'hot-path': [
    'acquire-lanes',
    'analyze-deliveries',
    'analyze-events',
    'bury',
    'claim-held-lanes',
    'claim-light',
    'complete-many',
    'complete-one',
    'discard-plans',
    'extend-lease',
    'forget-in-flight',
    'look-due',
    'planner-statistics',
    'publish',
    'publish-guard',
    'publish-new',
    'publish-new-one',
    'publish-probe',
    'publish-undo',
    'release',
    'relinquish',
    'report-live-lag',
    'reschedule',
  ],
  /** What operators, the CLI and the bus's start run: listings, statistics, requeue, purge, subscriptions, replays. */
  admin: [
    'cancel',
    'list-deliveries',
    'list-lanes',
    'list-paused-handlers',
    'list-subscriptions',
    'pause-handler',
    'purge-expired',
    'replay-cancel',
    'replay-in-flight',
    'replay-late-plan',
    'replay-list',
    'replay-live-wait',
    'replay-lock',
    'replay-no-jit',
    'replay-outstanding',
    'replay-plan',
    'replay-quiesce',
    'replay-start',
    'replay-step',
    'replay-take',
    'requeue',
    'resume-handler',
    'statistics',
    'subscribe',
    'unsubscribe',
  ],
  /** What setup() runs, the upgrade of an earlier layout included. */
  setup: [
    'setup-applied',
    'setup-inspect',
    'setup-lock',
    'setup-record',
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
  ],
} as const;

export type StatementFolder = keyof typeof STATEMENT_FOLDERS;
export type StatementName = (typeof STATEMENT_FOLDERS)[StatementFolder][number];
export type Statements = Readonly<Record<StatementName, SqlStatement>>;

const FOLDER_OF = new Map<StatementName, StatementFolder>(
  Object.entries(STATEMENT_FOLDERS).flatMap(([folder, names]) =>
    names.map((name): [StatementName, StatementFolder] => [name, folder as StatementFolder]),
  ),
);

/** Every statement name, whatever its folder. */
export const STATEMENT_NAMES: readonly StatementName[] = [...FOLDER_OF.keys()];

/** True for the name of a statement of `sql/` (a header's first word, say). */
export function isStatementName(name: string): name is StatementName {
  return FOLDER_OF.has(name as StatementName);
}

/** A statement's file, relative to the package root: `sql/<folder>/<name>.sql`. */
export function statementPath(name: StatementName): string {
  return `sql/${FOLDER_OF.get(name)}/${name}.sql`;
}

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
    text = spliceFragments(readFileSync(packageFile(statementPath(name)), 'utf8'), readFragmentFile);
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
