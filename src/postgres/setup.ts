import { InvalidOptionsError, RelayBusError, StoreUnavailableError } from '../core/errors.js';
import { isRetryableDatabaseError, sqlStateOf } from './retryable-errors.js';
import { asScript, loadMigrations, loadSupplement } from './schema-sql.js';
import type { PostgresDriver, SqlExecutor } from './sql-client.js';
import type { Statements } from './statements.js';
import { inspectLayout, type Layout } from './upgrade/layout.js';
import { startProgress, upgradeFailure, upgradeState, type UpgradeProgress } from './upgrade/interrupted.js';
import {
  checkRowLease,
  convertRowLease,
  finishRowLease,
  prepareRowLease,
  type RowLeaseCounts,
} from './upgrade/row-lease.js';

/**
 * setup(): create or upgrade the relaybus tables of one schema, under an advisory lock keyed by the
 * schema name, so several processes may call it at once: the first applies what is missing, the
 * others wait and then find nothing to do.
 *
 * - An empty schema, or one at an earlier relaybus version: the missing migrations of
 *   `schema/migrations/` (journal order) and the supplement, in one transaction.
 * - The row-lease layout of relaybus 0.1: checked first (`upgrade/preconditions.ts`: every table and
 *   column it reads), then converted in place (see `upgrade/row-lease.ts`), in batches of their own
 *   transactions, then finished, migrated and supplemented in one transaction. A failure after the
 *   first commit says which steps committed and how to resume (`upgrade/interrupted.ts`).
 * - Anything else (a newer relaybus's schema, foreign tables under relaybus's names): refused with
 *   a `SchemaMismatchError` before anything is written (`upgrade/layout.ts`).
 */

/** Long work setup() reports while it runs (the 0.1 upgrade), for a command line to show. */
export type SetupProgress =
  | { readonly step: 'convert'; readonly done: number; readonly total: number }
  | { readonly step: 'finish' };

export interface SetupOptions {
  /** Deliveries converted per transaction when upgrading a 0.1 schema (default 5,000). */
  readonly batchSize?: number;
  /** Called after each batch of the 0.1 conversion and before its final step; awaited. */
  readonly onProgress?: (progress: SetupProgress) => void | Promise<void>;
}

/** What one setup() call did. */
export interface SetupResult {
  /** The layout it found. */
  readonly from: Layout['kind'];
  /** The migrations it applied, in order (0000_init included for a 0.1 upgrade: its layout is the upgrade's target). */
  readonly applied: readonly string[];
  /** For a 0.1 upgrade: what the schema held, and what the final step released. */
  readonly rowLease?: {
    readonly counts: RowLeaseCounts;
    readonly released: { readonly pending: number; readonly dead: number };
  };
}

export const DEFAULT_UPGRADE_BATCH_SIZE = 5_000;
const INSUFFICIENT_PRIVILEGE = '42501';

function privilegeError(error: unknown, schema: string, changed: boolean): StoreUnavailableError | undefined {
  if (sqlStateOf(error) !== INSUFFICIENT_PRIVILEGE) return undefined;
  const detail = error instanceof Error ? error.message : String(error);
  return new StoreUnavailableError(
    `setup() of schema "${schema}" lacks a privilege: ${detail}. Run relaybus setup as a role that owns the schema ` +
      `(and start the bus with setupStore: false). ${
        changed ? 'The 0.1 upgrade had begun: running it again as the owner finishes it.' : 'Nothing was changed.'
      }`,
    { cause: error, retryable: false },
  );
}

/** Every failure as a `RelayBusError`: privileges named, driver errors classified once (retryable or not). */
export function setupError(error: unknown, schema: string, changed: boolean): RelayBusError {
  if (error instanceof RelayBusError) return error;
  const privilege = privilegeError(error, schema, changed);
  if (privilege !== undefined) return privilege;
  const retryable = isRetryableDatabaseError(error);
  const state = sqlStateOf(error);
  const detail = error instanceof Error ? error.message : String(error);
  return new StoreUnavailableError(
    `setup() of schema "${schema}" failed${state === undefined ? '' : ` (SQLSTATE ${state})`}: ${detail}.` +
      (retryable ? ' It is safe to retry: setup() finishes what an interrupted run started.' : ''),
    { cause: error, retryable },
  );
}

/** Create, migrate or upgrade the relaybus tables of `schema` (see the top of this module); throws only `RelayBusError`s. */
export async function setupPostgres<TTx>(
  driver: PostgresDriver<TTx>,
  schema: string,
  statements: Statements,
  options: SetupOptions = {},
): Promise<SetupResult> {
  const batchSize = options.batchSize ?? DEFAULT_UPGRADE_BATCH_SIZE;
  if (!Number.isSafeInteger(batchSize) || batchSize < 1) {
    throw new InvalidOptionsError(`batchSize must be a positive integer, got ${JSON.stringify(batchSize)}.`);
  }
  const migrations = loadMigrations(schema);
  const target = migrations[0]!;
  const supplement = asScript(loadSupplement(schema));
  const locked = <T>(fn: (executor: SqlExecutor) => Promise<T>): Promise<T> =>
    driver.transaction(async (tx) => {
      const executor = driver.unwrap(tx);
      await executor.run(statements['setup-lock'], [schema]);
      return fn(executor);
    });
  /** The migrations `layout` lacks, then the supplement; returns the names applied. */
  const complete = async (executor: SqlExecutor, applied: readonly string[]): Promise<string[]> => {
    const done = new Set(applied);
    const now: string[] = [];
    for (const migration of migrations) {
      if (done.has(migration.name)) continue;
      await executor.exec(asScript(migration.statements));
      await executor.run(statements['setup-record'], [migration.name]);
      now.push(migration.name);
    }
    await executor.exec(supplement);
    return now;
  };
  const inspect = (executor: SqlExecutor) => inspectLayout(executor, statements, schema, migrations);

  let progress: UpgradeProgress | undefined;
  try {
    const first = await locked(async (executor): Promise<{ result: SetupResult } | { counts: RowLeaseCounts }> => {
      const layout = await inspect(executor);
      if (layout.kind !== 'row-lease') {
        return {
          result: {
            from: layout.kind,
            applied: await complete(executor, layout.kind === 'empty' ? [] : layout.applied),
          },
        };
      }
      const counts = await checkRowLease(executor, statements, schema, target);
      progress = startProgress(counts.deliveries);
      await prepareRowLease(executor, statements, target);
      return { counts };
    });
    if ('result' in first) return first.result;
    progress!.prepared = true;
    return await upgradeRowLease(first.counts, progress!);
  } catch (error) {
    const failure = setupError(error, schema, progress?.prepared ?? false);
    throw progress === undefined ? failure : upgradeFailure(failure, schema, progress);
  }

  async function upgradeRowLease(counts: RowLeaseCounts, progress: UpgradeProgress): Promise<SetupResult> {
    let after = '-1';
    progress.step = 'convert';
    // Batches until one comes back short: rows added meanwhile (a 0.1 publisher still running) are the final step's.
    for (;;) {
      const batch = await locked(async (executor) => {
        if ((await inspect(executor)).kind !== 'row-lease') return null; // another process finished the upgrade
        return convertRowLease(executor, statements, after, batchSize);
      });
      if (batch === null) break;
      if (batch.scanned > 0) progress.batches += 1;
      progress.converted += batch.scanned;
      progress.moved += batch.moved;
      const done = progress.converted;
      await options.onProgress?.({ step: 'convert', done, total: Math.max(done, counts.deliveries) });
      if (batch.lastId === null || batch.scanned < batchSize) break;
      after = batch.lastId;
    }
    progress.step = 'finish';
    await options.onProgress?.({ step: 'finish' });
    return locked(async (executor) => {
      const layout = await inspect(executor);
      if (layout.kind !== 'row-lease')
        return { from: 'row-lease', applied: await complete(executor, layout.kind === 'empty' ? [] : layout.applied) };
      const finished = await finishRowLease(executor, statements, schema, target, upgradeState(progress));
      const applied = await complete(executor, [target.name]);
      return {
        from: 'row-lease',
        applied: [target.name, ...applied],
        rowLease: { counts, released: finished.released },
      };
    });
  }
}
