import { DATABASE_FLAGS, HELP_FLAG, parseFlags, renderHelp, VERBOSE_FLAG, type FlagSpecs } from '../args.js';
import { ExitCode, writeLine, type Command } from '../command.js';
import { DEFAULT_UPGRADE_BATCH_SIZE } from '../../postgres/setup.js';
import { runSetup, withDriver } from './upgrade.js';

/**
 * `relaybus setup`: create or upgrade the relaybus tables (setup()): idempotent, and safe to run
 * from several deploy jobs at once (an advisory lock serialises them). A relaybus 0.1 schema is
 * upgraded in place, with progress on stderr; `relaybus upgrade --dry-run` shows the plan first.
 */

const FLAGS = { ...DATABASE_FLAGS, ...VERBOSE_FLAG, ...HELP_FLAG } as const satisfies FlagSpecs;

/** `relaybus setup`. */
export const setupCommand: Command = {
  name: 'setup',
  summary: 'Create or upgrade the relaybus tables (idempotent).',
  help: renderHelp({
    usage: ['relaybus setup [options]'],
    description: 'Create the relaybus schema and tables, or apply the migrations they lack, then the storage parameters and the 256 lane rows. A relaybus 0.1 schema is upgraded in place (stop its workers first; relaybus upgrade --dry-run shows the plan). A schema of a newer relaybus is refused, never downgraded. Idempotent, and safe to run from several processes at once. bus.start() runs the same setup unless the bus has setupStore: false; run this in a deploy step when workers should not own DDL, or use relaybus sql to hand the DDL to your migration tool.',
    flags: FLAGS,
    sections: [
      { title: 'Exit codes', lines: ['0  the tables are ready', '1  refused (a newer or unknown schema, 0.1 workers holding leases),', '   or the database failed (unreachable, no permission)', '2  usage error'] },
      { title: 'Examples', lines: ['DATABASE_URL=postgres://app@db:5432/app relaybus setup', 'relaybus setup --database-url postgres://app@db:5432/app --schema events'] },
    ],
  }),
  async run(args, context) {
    const { values } = parseFlags('setup', args, FLAGS);
    return withDriver(values, context, async (connection) => {
      const { result, ms } = await runSetup(connection, context, DEFAULT_UPGRADE_BATCH_SIZE);
      if (result.rowLease !== undefined) writeLine(context.stderr, `relaybus: upgraded from the relaybus 0.1 layout: applied ${result.applied.join(', ')}`);
      writeLine(context.stdout, `relaybus: schema "${connection.schema}" on ${connection.target} is set up (${ms} ms)`);
      return ExitCode.ok;
    });
  },
};
