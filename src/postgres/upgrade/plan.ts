import { loadMigrations } from '../schema-sql.js';
import { setupError } from '../setup.js';
import type { PostgresDriver } from '../sql-client.js';
import type { Statements } from '../statements.js';
import { inspectLayout, type Layout } from './layout.js';
import {
  assertRowLeaseLayout,
  NOTHING_CHANGED,
  rowLeaseDataProblems,
  UpgradePreconditionError,
} from './preconditions.js';
import { countRowLease, leasesHeldError, type RowLeaseCounts } from './row-lease.js';

/**
 * What setup() would do to a schema, read in a read-only transaction (`relaybus upgrade
 * --dry-run`): the layout found, the migrations to apply, and for a 0.1 schema the rows to
 * convert and what becomes of each (counted with the rules the upgrade applies). A layout setup()
 * refuses throws the same `SchemaMismatchError` setup() would (for a 0.1 schema that lacks a column
 * the upgrade reads: `UpgradePreconditionError`, from the same check).
 */

export interface SetupPlan {
  readonly schema: string;
  readonly layout: Layout['kind'];
  /** Migrations the schema records already. */
  readonly applied: readonly string[];
  /** Migrations setup() would apply, in order (for a 0.1 schema the first is the upgrade's target layout). */
  readonly migrations: readonly string[];
  /** For a 0.1 schema: what it holds. */
  readonly rowLease?: RowLeaseCounts;
  /** The steps, in words, in order. */
  readonly steps: readonly string[];
  /** Why setup() would refuse right now (0.1 workers hold leases), or undefined. */
  readonly refusal?: string;
}

const n = (value: number): string => value.toLocaleString('en-US');

/** The plan of setup() for `schema`, changing nothing. */
export async function planPostgresSetup<TTx>(
  driver: PostgresDriver<TTx>,
  schema: string,
  statements: Statements,
  options: { readonly batchSize: number },
): Promise<SetupPlan> {
  const migrations = loadMigrations(schema);
  const names = migrations.map((m) => m.name);
  return driver
    .transaction(async (tx): Promise<SetupPlan> => {
      const executor = driver.unwrap(tx);
      await executor.exec('SET TRANSACTION READ ONLY');
      const layout = await inspectLayout(executor, statements, schema, migrations);
      const supplement = 'set the storage parameters and make sure the 256 lane rows exist (idempotent)';
      if (layout.kind === 'empty') {
        return {
          schema,
          layout: layout.kind,
          applied: [],
          migrations: names,
          steps: [
            `${layout.schemaExists ? '' : `create schema "${schema}", then `}apply migrations ${names.join(', ')} (one transaction)`,
            supplement,
          ],
        };
      }
      if (layout.kind === 'relaybus') {
        const missing = names.filter((name) => !layout.applied.includes(name));
        return {
          schema,
          layout: layout.kind,
          applied: layout.applied,
          migrations: missing,
          steps: [
            missing.length === 0
              ? `nothing to migrate: the schema is at ${layout.applied[layout.applied.length - 1]}`
              : `apply migration${missing.length === 1 ? '' : 's'} ${missing.join(', ')} (one transaction, with the next step)`,
            supplement,
          ],
        };
      }
      const [target, ...later] = names;
      // The layout first, as the upgrade does: the counts below read the lease columns.
      await assertRowLeaseLayout(executor, statements, schema, migrations[0]!);
      const counts = await countRowLease(executor, statements);
      const problems = rowLeaseDataProblems(counts);
      const refusal =
        problems.length > 0
          ? new UpgradePreconditionError(schema, problems, NOTHING_CHANGED).message
          : counts.leased > 0
            ? leasesHeldError(schema, counts.leased, counts.leaseOwners, counts.leasedUntil).message
            : undefined;
      return {
        schema,
        layout: layout.kind,
        applied: [],
        migrations: names,
        rowLease: counts,
        ...(refusal === undefined ? {} : { refusal }),
        steps: [
          'add events.handlers, deliveries.lane and deliveries.claims; drop the eight 0.1 indexes of deliveries; create the new tables ' +
            'and the SQL lane function (one short transaction)',
          `convert ${n(counts.toConvert)} of ${n(counts.deliveries)} deliveries in batches of ${n(options.batchSize)} (a transaction each): their lane, ` +
            `their events' handlers; the ${n(counts.completed)} completed ones move to the completion history (listed and counted until retention purges them)`,
          `final transaction, deliveries and events locked: convert what is left; of the ${n(counts.processing)} deliveries in flight, ` +
            `${n(counts.processing - counts.lastAttempt)} go back to pending (attempts kept) and ${n(counts.lastAttempt)} on their last ` +
            `attempt become dead letters; drop the lease columns, the constraints and indexes of ${target}, the key counters, record ${target}`,
          ...(later.length > 0
            ? [`apply migration${later.length === 1 ? '' : 's'} ${later.join(', ')} (same transaction)`]
            : []),
          `${supplement} (same transaction)`,
        ],
      };
    })
    .catch((error: unknown) => {
      throw setupError(error, schema, false);
    });
}
