import { basename } from 'node:path';
import type { Subscription } from '../../index.js';
import type { ResolvedHandler } from '../../core/handlers.js';
import { RESOLVED_HANDLERS, subscriptionsOf } from '../../bus/subscription-keeper.js';
import { DEFAULT_SCHEMA, postgresStore } from '../../postgres/index.js';
import { DEFAULT_UPGRADE_BATCH_SIZE } from '../../postgres/setup.js';
import { DATABASE_FLAGS, HELP_FLAG, parseFlags, renderHelp, VERBOSE_FLAG, type FlagSpecs } from '../args.js';
import { CliFailure, ExitCode, UsageError, writeLine, type CliContext, type Command } from '../command.js';
import { loadBus, resolveConfigPath } from '../config-loader.js';
import { runSetup, withDriver } from './upgrade.js';

/**
 * `relaybus setup`: create or upgrade the relaybus tables (setup()): idempotent, and safe to run
 * from several deploy jobs at once (an advisory lock serialises them). A relaybus 0.1 schema is
 * upgraded in place, with progress on stderr; `relaybus upgrade --dry-run` shows the plan first.
 */

const FLAGS = {
  ...DATABASE_FLAGS,
  subscriptions: {
    type: 'string',
    value: 'config',
    description:
      'Then record the subscriptions of every handler the bus of this config module registers (the module relaybus worker runs), so publishes fan out to them before any worker has started.',
  },
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

/** The subscriptions of the handlers the bus of `path` registers, checked before anything touches the database. */
async function subscriptionsFromConfig(
  path: string,
  schema: string,
  context: CliContext,
): Promise<{ config: string; subscriptions: Subscription[] }> {
  const absolute = resolveConfigPath(path, context.cwd);
  const config = basename(absolute);
  const bus = await loadBus(absolute);
  // Subscriptions of one schema serve the buses on that schema: recording another's is a mistake.
  const store = bus.store as { readonly kind?: unknown; readonly schema?: unknown };
  if (store.kind === 'postgres' && typeof store.schema === 'string' && store.schema !== schema) {
    throw new UsageError(
      `the bus of ${config} uses schema "${store.schema}", and this setup works on "${schema}": pass --schema ${store.schema}`,
    );
  }
  if (bus.handlers?.length === 0) {
    throw new CliFailure(
      `${config} registers no handler (bus.on), so there is no subscription to record; pass the module your workers run. Nothing was changed.`,
    );
  }
  const handlers = (bus as { readonly [RESOLVED_HANDLERS]?: unknown })[RESOLVED_HANDLERS];
  if (!Array.isArray(handlers)) {
    throw new CliFailure(
      `the bus of ${config} does not list its handlers' settings (a relaybus version without subscriptions); upgrade relaybus where ${config} imports it`,
    );
  }
  return { config, subscriptions: subscriptionsOf(handlers as readonly ResolvedHandler<unknown>[]) };
}

/** `order.placed: email, ledger; order.paid: ledger`. */
function describeSubscriptions(subscriptions: readonly Subscription[]): string {
  const byType = new Map<string, string[]>();
  for (const { eventType, handler } of subscriptions)
    byType.set(eventType, [...(byType.get(eventType) ?? []), handler]);
  return [...byType].map(([eventType, handlers]) => `${eventType}: ${handlers.join(', ')}`).join('; ');
}

/** `relaybus setup`. */
export const setupCommand: Command = {
  name: 'setup',
  summary: 'Create or upgrade the relaybus tables (idempotent).',
  help: renderHelp({
    usage: ['relaybus setup [--subscriptions <config>] [options]'],
    description:
      'Create the relaybus schema and tables, or apply the migrations they lack, then the storage parameters and the 256 lane rows. A relaybus 0.1 schema is upgraded in place (stop its workers first; relaybus upgrade --dry-run shows the plan). A schema of a newer relaybus is refused, never downgraded. Idempotent, and safe to run from several processes at once. bus.start() runs the same setup unless the bus has setupStore: false; run this in a deploy step when workers should not own DDL, or use relaybus sql to hand the DDL to your migration tool. ' +
      'With --subscriptions <config>, it then loads the config module as relaybus worker does (without starting the bus) and records the subscriptions of its handlers: publishers that do not register the handlers themselves fan out to them from then on, even before a worker has started.',
    flags: FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: [
          '0  the tables are ready (and the subscriptions recorded)',
          '1  refused (a newer or unknown schema, 0.1 workers holding leases),',
          '   or the database failed (unreachable, no permission),',
          '   or the --subscriptions module threw or registers no handler',
          '2  usage error, or the --subscriptions module is missing, exports no bus,',
          '   or its bus uses another schema than --schema',
        ],
      },
      {
        title: 'Examples',
        lines: [
          'DATABASE_URL=postgres://app@db:5432/app relaybus setup',
          'relaybus setup --database-url postgres://app@db:5432/app --schema events',
          'relaybus setup --subscriptions dist/bus.js',
        ],
      },
    ],
  }),
  async run(args, context) {
    const { values } = parseFlags('setup', args, FLAGS);
    // Load the config first: a module that cannot be loaded stops the command before it changes anything.
    const recording =
      values.subscriptions === undefined
        ? undefined
        : await subscriptionsFromConfig(values.subscriptions, values.schema ?? DEFAULT_SCHEMA, context);
    return withDriver(values, context, async (connection) => {
      const { result, ms } = await runSetup(connection, context, DEFAULT_UPGRADE_BATCH_SIZE);
      if (result.rowLease !== undefined)
        writeLine(
          context.stderr,
          `relaybus: upgraded from the relaybus 0.1 layout: applied ${result.applied.join(', ')}`,
        );
      writeLine(context.stdout, `relaybus: schema "${connection.schema}" on ${connection.target} is set up (${ms} ms)`);
      if (recording !== undefined) {
        const { config, subscriptions } = recording;
        // The store only borrows the connection: withDriver closes it.
        await postgresStore({ driver: connection.driver, schema: connection.schema, notify: false }).subscribe(
          subscriptions,
          { seen: false },
        );
        writeLine(
          context.stdout,
          `relaybus: recorded ${subscriptions.length} subscription${subscriptions.length === 1 ? '' : 's'} of the handlers of ${config} (${describeSubscriptions(subscriptions)})`,
        );
      }
      return ExitCode.ok;
    });
  },
};
