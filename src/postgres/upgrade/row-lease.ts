import { SchemaMismatchError } from '../../core/errors.js';
import type { RowOf } from '../rows.js';
import type { Migration } from '../schema-sql.js';
import type { SqlExecutor } from '../sql-client.js';
import type { StatementName, Statements } from '../statements.js';
import {
  assertRowLeaseLayout,
  NOTHING_CHANGED,
  rowLeaseDataProblems,
  UpgradePreconditionError,
} from './preconditions.js';

/**
 * The upgrade of a relaybus 0.1 schema (the row-lease layout: status and lease columns on every
 * delivery, eight secondary indexes), in three parts so that a large table is never rewritten in
 * one giant transaction:
 *
 * 1. prepare (one short transaction): add the new columns (nullable), drop the 0.1 secondary
 *    indexes (the conversion's writes then maintain none of them), create the new tables and the
 *    SQL lane function;
 * 2. convert, in batches of deliveries in id order (a transaction each): lane, events.handlers,
 *    completed rows into the completion history;
 * 3. finish (one transaction, deliveries and events locked): check that no 0.1 worker holds a
 *    lease, convert what is left, release processing rows, bring both tables to the layout of
 *    migration 0000_init and record it; the later migrations then apply as on any 0000 schema.
 *
 * Every step is idempotent and the marker of a 0.1 schema (deliveries.lease_token) disappears only
 * when the finish commits, so an upgrade interrupted anywhere is completed by the next setup().
 */

/** What a 0.1 schema holds, read without changing it (`upgrade-row-lease-plan`). */
export interface RowLeaseCounts {
  readonly deliveries: number;
  readonly pending: number;
  readonly processing: number;
  /**
   * Processing deliveries whose claim spent their last attempt: the final step makes them dead, the other processing
   * ones pending (sql/fragments/row-lease-last-attempt.sql, one rule for both the count and the upgrade).
   */
  readonly lastAttempt: number;
  readonly completed: number;
  readonly dead: number;
  /** Deliveries without a lane yet, plus completed ones (they move to the history). */
  readonly toConvert: number;
  readonly events: number;
  /** Deliveries kept by the upgrade whose attempts the upgraded layout's check refuses (attempts < 0, max_attempts < 1). */
  readonly unfit: number;
  /** Deliveries 0.1 workers hold under a lease that has not expired. */
  readonly leased: number;
  readonly leaseOwners: readonly string[];
  readonly leasedUntil: Date | null;
}

type PlanRow = RowOf<'upgrade-row-lease-plan'>;

const toDate = (value: Date | string | null): Date | null =>
  value === null ? null : value instanceof Date ? value : new Date(value);

/** Count what the upgrade of a 0.1 schema has to do (after `assertRowLeaseLayout`: the count reads the lease columns). */
export async function countRowLease(executor: SqlExecutor, statements: Statements): Promise<RowLeaseCounts> {
  const [row] = await executor.run<PlanRow>(statements['upgrade-row-lease-plan'], [null]);
  const r = row!;
  return {
    deliveries: Number(r.deliveries),
    pending: Number(r.pending),
    processing: Number(r.processing),
    lastAttempt: Number(r.last_attempt),
    completed: Number(r.completed),
    dead: Number(r.dead),
    toConvert: Number(r.to_convert),
    events: Number(r.events),
    unfit: Number(r.unfit),
    leased: Number(r.leased),
    leaseOwners: r.lease_owners ?? [],
    leasedUntil: toDate(r.leased_until),
  };
}

/** The refusal while 0.1 workers hold leases: they would fail on the dropped columns, and their deliveries would run twice. */
export function leasesHeldError(
  schema: string,
  leased: number,
  owners: readonly string[],
  until: Date | null,
  started = false,
): SchemaMismatchError {
  const who =
    owners.length === 0
      ? ''
      : ` (owner${owners.length === 1 ? '' : 's'} ${owners.slice(0, 5).join(', ')}${owners.length > 5 ? ', ...' : ''})`;
  const when = until === null ? '' : `, the last one until ${until.toISOString()}`;
  return new SchemaMismatchError(
    `Schema "${schema}" has the layout of relaybus 0.1 and its workers hold leases on ${leased} deliver${leased === 1 ? 'y' : 'ies'}${who}${when}: ` +
      'stop every relaybus 0.1 worker first, then run the upgrade again (relaybus upgrade, or setup()). ' +
      (started
        ? 'The upgrade stopped before its final step (the 0.1 tables keep their data; their secondary indexes are already dropped); running it again finishes it.'
        : 'The upgrade changed nothing.'),
  );
}

/** Throw `leasesHeldError` when 0.1 workers hold leases. */
export async function assertNoRowLeases(
  executor: SqlExecutor,
  statements: Statements,
  schema: string,
  started: boolean,
): Promise<void> {
  const [row] = await executor.run<RowOf<'upgrade-row-lease-leases'>>(statements['upgrade-row-lease-leases'], [null]);
  if (Number(row!.leased) > 0)
    throw leasesHeldError(schema, Number(row!.leased), row!.lease_owners ?? [], toDate(row!.leased_until), started);
}

/**
 * Everything the upgrade needs before its first change, in the caller's transaction: the layout (every table and
 * column it reads), then the rows (none the upgraded layout's checks refuse) and no live 0.1 lease. Returns the counts.
 */
export async function checkRowLease(
  executor: SqlExecutor,
  statements: Statements,
  schema: string,
  target: Migration,
): Promise<RowLeaseCounts> {
  await assertRowLeaseLayout(executor, statements, schema, target);
  const counts = await countRowLease(executor, statements);
  const problems = rowLeaseDataProblems(counts);
  if (problems.length > 0) throw new UpgradePreconditionError(schema, problems, NOTHING_CHANGED);
  if (counts.leased > 0) throw leasesHeldError(schema, counts.leased, counts.leaseOwners, counts.leasedUntil);
  return counts;
}

const CREATE_TABLE = /^CREATE TABLE "/;
const CREATE_INDEX = /^CREATE (UNIQUE )?INDEX "/;

/**
 * The statements of the target migration (0000_init) made re-runnable over the 0.1 tables: tables
 * and indexes only where missing. Its one other kind of statement, the foreign key, is added after
 * the finish dropped 0.1's (which cascaded).
 */
export function idempotentTarget(target: Migration): string[] {
  return target.statements.map((statement) => {
    if (CREATE_TABLE.test(statement)) return statement.replace(CREATE_TABLE, 'CREATE TABLE IF NOT EXISTS "');
    if (CREATE_INDEX.test(statement))
      return statement.replace(
        CREATE_INDEX,
        (_all, unique: string | undefined) => `CREATE ${unique ?? ''}INDEX IF NOT EXISTS "`,
      );
    if (
      /^CREATE SCHEMA IF NOT EXISTS /.test(statement) ||
      /^ALTER TABLE \S+ ADD CONSTRAINT "[^"]+" FOREIGN KEY/.test(statement)
    )
      return statement;
    throw new Error(
      `relaybus: the 0.1 upgrade cannot re-run this statement of ${target.name}: ${statement.slice(0, 80)}`,
    );
  });
}

/** Only the tables of the target migration, where missing (the conversion writes the completion history). */
export function targetTables(target: Migration): string[] {
  return idempotentTarget(target).filter((statement) => statement.startsWith('CREATE TABLE IF NOT EXISTS'));
}

/** One step of the upgrade: a statement of `sql/`, or DDL rendered from the target migration. */
export type RowLeaseStep =
  | { readonly kind: 'ddl'; readonly name: StatementName }
  | { readonly kind: 'target'; readonly statements: readonly string[] };

/** The prepare part (idempotent; the finish runs it again in case an older run stopped before it). */
export function prepareSteps(target: Migration): RowLeaseStep[] {
  return [
    { kind: 'ddl', name: 'upgrade-row-lease-events-columns' },
    { kind: 'ddl', name: 'upgrade-row-lease-deliveries-columns' },
    { kind: 'ddl', name: 'upgrade-row-lease-drop-indexes' },
    { kind: 'ddl', name: 'upgrade-row-lease-rename-unique' },
    { kind: 'target', statements: targetTables(target) },
    { kind: 'ddl', name: 'upgrade-lane-function' },
  ];
}

async function runSteps(executor: SqlExecutor, statements: Statements, steps: readonly RowLeaseStep[]): Promise<void> {
  for (const step of steps) {
    if (step.kind === 'ddl') await executor.exec(statements[step.name].text);
    else for (const statement of step.statements) await executor.exec(statement);
  }
}

/** Part 1: prepare (in the caller's transaction, under the setup lock). */
export async function prepareRowLease(executor: SqlExecutor, statements: Statements, target: Migration): Promise<void> {
  await runSteps(executor, statements, prepareSteps(target));
}

/** What one conversion batch did. */
export interface ConvertResult {
  /** The highest delivery id read (the next batch starts after it); null when nothing was left. */
  readonly lastId: string | null;
  readonly scanned: number;
  readonly laned: number;
  readonly moved: number;
}

/** Part 2: convert up to `limit` deliveries after id `after` (null and null: everything still to convert). */
export async function convertRowLease(
  executor: SqlExecutor,
  statements: Statements,
  after: string | null,
  limit: number | null,
): Promise<ConvertResult> {
  const [row] = await executor.run<RowOf<'upgrade-row-lease-convert'>>(statements['upgrade-row-lease-convert'], [
    after,
    limit,
  ]);
  return { lastId: row!.last_id, scanned: Number(row!.scanned), laned: Number(row!.laned), moved: Number(row!.moved) };
}

/** What the finish did. */
export interface FinishResult {
  readonly converted: ConvertResult;
  /** Processing deliveries back to pending, and those that had spent their last attempt (now dead). */
  readonly released: { readonly pending: number; readonly dead: number };
}

/**
 * Part 3: finish, in the caller's transaction under the setup lock: afterwards the schema is at
 * `target` (recorded), and the caller applies the later migrations and the supplement. The layout
 * is checked again first, under the lock (`state` says what the upgrade committed, for the refusal).
 */
export async function finishRowLease(
  executor: SqlExecutor,
  statements: Statements,
  schema: string,
  target: Migration,
  state: string,
): Promise<FinishResult> {
  await executor.exec(statements['upgrade-row-lease-lock'].text);
  await assertRowLeaseLayout(executor, statements, schema, target, state);
  await assertNoRowLeases(executor, statements, schema, true);
  await prepareRowLease(executor, statements, target);
  const converted = await convertRowLease(executor, statements, null, null);
  const [released] = await executor.run<RowOf<'upgrade-row-lease-release'>>(statements['upgrade-row-lease-release'], [
    null,
  ]);
  await executor.run(statements['upgrade-row-lease-events-handlers'], []);
  await runSteps(executor, statements, finishLayoutSteps(target));
  await executor.run(statements['upgrade-row-lease-key-sequences'], []);
  await executor.exec(statements['upgrade-drop-lane-function'].text);
  await executor.run(statements['setup-record'], [target.name]);
  return { converted, released: { pending: Number(released!.pending), dead: Number(released!.dead) } };
}

/** The catalog changes of the finish, after the data is converted. */
export function finishLayoutSteps(target: Migration): RowLeaseStep[] {
  return [
    { kind: 'ddl', name: 'upgrade-row-lease-events-layout' },
    { kind: 'ddl', name: 'upgrade-row-lease-deliveries-layout' },
    { kind: 'target', statements: idempotentTarget(target) },
  ];
}
