import { DATABASE_FLAGS, HELP_FLAG, parseFlags, renderHelp, VERBOSE_FLAG, type FlagSpecs } from '../args.js';
import { withAdminStore } from '../admin-store.js';
import { ExitCode, writeLine, type Command } from '../command.js';

/**
 * `relaybus setup`: create or upgrade the relaybus tables (`store.setup()`): idempotent, and safe
 * to run from several deploy jobs at once (an advisory lock serialises them).
 */

const FLAGS = { ...DATABASE_FLAGS, ...VERBOSE_FLAG, ...HELP_FLAG } as const satisfies FlagSpecs;

/** `relaybus setup`. */
export const setupCommand: Command = {
  name: 'setup',
  summary: 'Create or upgrade the relaybus tables (idempotent).',
  help: renderHelp({
    usage: ['relaybus setup [options]'],
    description: 'Create the relaybus schema and tables, or apply the migrations they lack, then the storage parameters and the 256 lane rows. Idempotent, and safe to run from several processes at once. bus.start() runs the same setup unless the bus has setupStore: false; run this in a deploy step when workers should not own DDL, or use relaybus sql to hand the DDL to your migration tool.',
    flags: FLAGS,
    sections: [
      { title: 'Exit codes', lines: ['0  the tables are ready', '1  the database failed (unreachable, no permission)', '2  usage error'] },
      { title: 'Examples', lines: ['DATABASE_URL=postgres://app@db:5432/app relaybus setup', 'relaybus setup --database-url postgres://app@db:5432/app --schema events'] },
    ],
  }),
  async run(args, context) {
    const { values } = parseFlags('setup', args, FLAGS);
    return withAdminStore(values, context, async ({ store, schema, target }) => {
      const started = performance.now();
      await store.setup();
      writeLine(context.stdout, `relaybus: schema "${schema}" on ${target} is set up (${Math.round(performance.now() - started)} ms)`);
      return ExitCode.ok;
    });
  },
};
