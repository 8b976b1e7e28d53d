import { RelayBusError } from '../../index.js';
import { DEFAULT_UPGRADE_BATCH_SIZE, setupPostgres, type SetupResult } from '../../postgres/setup.js';
import { loadStatements } from '../../postgres/statements.js';
import { planPostgresSetup } from '../../postgres/upgrade/plan.js';
import { openAdminConnection, type AdminConnection } from '../admin-store.js';
import {
  DATABASE_FLAGS,
  HELP_FLAG,
  integerFlag,
  parseFlags,
  renderHelp,
  VERBOSE_FLAG,
  type FlagSpecs,
} from '../args.js';
import { CliFailure, ExitCode, UsageError, writeLine, type CliContext, type Command } from '../command.js';
import { createProgress, type Progress } from '../progress.js';

/**
 * `relaybus upgrade`: what `relaybus setup` does (create, migrate, or upgrade a relaybus 0.1
 * schema in place), with its plan first: `--dry-run` prints the plan and the rows to convert and
 * changes nothing. Both commands print progress on stderr while a 0.1 schema is converted, and
 * both refuse while 0.1 workers hold leases. They open their own small `pg` pool (the store's
 * setup() has no progress hook).
 */

const FLAGS = {
  'dry-run': {
    type: 'boolean',
    description: 'Print what would be done (the layout found, the migrations, the rows to convert) and change nothing.',
  },
  'batch-size': {
    type: 'string',
    value: 'n',
    description: `Deliveries converted per transaction when upgrading a relaybus 0.1 schema. Default: ${DEFAULT_UPGRADE_BATCH_SIZE}.`,
  },
  ...DATABASE_FLAGS,
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

/** Run `fn` with a driver on `--database-url` (or DATABASE_URL) and `--schema`; closes the pool afterwards. */
async function withDriver<T>(
  flags: { readonly 'database-url'?: string; readonly schema?: string },
  context: CliContext,
  fn: (connection: AdminConnection) => Promise<T>,
): Promise<T> {
  const connection = await openAdminConnection(flags, context, 1);
  try {
    return await fn(connection);
  } catch (error) {
    if (error instanceof RelayBusError || error instanceof UsageError || error instanceof CliFailure) throw error;
    throw new CliFailure(`the database failed: ${error instanceof Error ? error.message : String(error)}`, {
      cause: error,
    });
  } finally {
    await connection.driver.close().catch(() => {});
  }
}

/** One line saying what `result` did. */
function summary(result: SetupResult): string {
  const n = (value: number) => value.toLocaleString('en-US');
  const applied = result.applied.length === 0 ? 'no migration was missing' : `applied ${result.applied.join(', ')}`;
  if (result.rowLease === undefined) return applied;
  const { counts, released } = result.rowLease;
  return (
    `upgraded from the relaybus 0.1 layout: ${n(counts.deliveries)} deliveries converted (${n(counts.completed)} completed ones moved to the ` +
    `completion history, ${n(released.pending)} in-flight ones back to pending${released.dead > 0 ? `, ${n(released.dead)} on their last attempt now dead` : ''}); ${applied}`
  );
}

/**
 * Set up `schema` as `relaybus setup` and `relaybus upgrade` do, reporting the 0.1 conversion's
 * progress on stderr. Resolves with the result and the time taken.
 */
export async function runSetup(
  connection: AdminConnection,
  context: CliContext,
  batchSize: number,
): Promise<{ result: SetupResult; ms: number }> {
  const started = performance.now();
  let progress: Progress | undefined;
  const result = await setupPostgres(connection.driver, connection.schema, loadStatements(connection.schema), {
    batchSize,
    onProgress: (report) => {
      if (report.step === 'convert') {
        progress ??= createProgress(context.stderr, 'converting relaybus 0.1 deliveries', report.total);
        progress.update(report.done);
        return;
      }
      progress?.finish();
      writeLine(
        context.stderr,
        'relaybus: final step: releasing in-flight deliveries, the new layout, the migrations (one transaction)',
      );
    },
  });
  return { result, ms: Math.round(performance.now() - started) };
}

/** `relaybus upgrade`. */
export const upgradeCommand: Command = {
  name: 'upgrade',
  summary: 'Show (--dry-run) and apply the schema upgrade, a relaybus 0.1 schema included.',
  help: renderHelp({
    usage: ['relaybus upgrade [--dry-run] [--batch-size n] [options]'],
    description:
      'Bring the relaybus tables to this version, as relaybus setup and bus.start() do: install them, apply the relaybus migrations they lack, or convert a relaybus 0.1 schema (the row-lease layout) in place, in batches of their own transactions and then one final transaction; an interrupted upgrade is finished by running it again (its error says which steps committed). Before its first change it checks that the 0.1 tables have every column it reads, with their types, and refuses, naming what is missing, if not. With --dry-run: run the same checks, print the plan and the rows to convert (what becomes of each), and change nothing. Stop every relaybus 0.1 worker first: while one holds a lease, both refuse. A schema of a newer relaybus is refused, never downgraded.',
    flags: FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: [
          '0  planned (--dry-run) or upgraded',
          '1  refused (0.1 workers hold leases, a 0.1 table lacks a column the upgrade reads,',
          '   a newer or unknown schema) or the database failed',
          '2  usage error',
        ],
      },
      {
        title: 'Examples',
        lines: [
          'relaybus upgrade --dry-run',
          'relaybus upgrade --database-url postgres://app@db:5432/app --schema events --batch-size 20000',
        ],
      },
    ],
  }),
  async run(args, context) {
    const { values } = parseFlags('upgrade', args, FLAGS);
    const batchSize = integerFlag('batch-size', values['batch-size'], 1, 1_000_000) ?? DEFAULT_UPGRADE_BATCH_SIZE;
    return withDriver(values, context, async (connection) => {
      const { driver, schema, target } = connection;
      if (values['dry-run']) {
        const plan = await planPostgresSetup(driver, schema, loadStatements(schema), { batchSize });
        const found =
          plan.layout === 'empty'
            ? 'no relaybus tables'
            : plan.layout === 'row-lease'
              ? 'the row-lease layout of relaybus 0.1 (deliveries.lease_token)'
              : `relaybus tables at ${plan.applied[plan.applied.length - 1]}`;
        writeLine(context.stdout, `relaybus: schema "${schema}" on ${target}: ${found}`);
        const counts = plan.rowLease;
        if (counts !== undefined) {
          const n = (value: number) => value.toLocaleString('en-US');
          writeLine(
            context.stdout,
            `  ${n(counts.deliveries)} deliveries (${n(counts.pending)} pending, ${n(counts.processing)} processing of which ` +
              `${n(counts.lastAttempt)} on their last attempt, ` +
              `${n(counts.completed)} completed, ${n(counts.dead)} dead), ${n(counts.toConvert)} to convert; ${n(counts.events)} events; ` +
              `${n(counts.leased)} under a live 0.1 lease`,
          );
        }
        writeLine(context.stdout, 'plan:');
        plan.steps.forEach((step, i) => writeLine(context.stdout, `  ${i + 1}. ${step}`));
        if (plan.refusal !== undefined) throw new CliFailure(`refused: ${plan.refusal}`);
        writeLine(context.stdout, 'dry run: nothing was changed');
        return ExitCode.ok;
      }
      const { result, ms } = await runSetup(connection, context, batchSize);
      writeLine(context.stdout, `relaybus: schema "${schema}" on ${target}: ${summary(result)} (${ms} ms)`);
      return ExitCode.ok;
    });
  },
};

/** The connection helper, for `relaybus setup`. */
export { withDriver };
