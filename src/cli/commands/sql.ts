import {
  createPostgresAdoptSql,
  createPostgresSchemaSql,
  createPostgresSupplementSql,
  DEFAULT_SCHEMA,
} from '../../postgres/index.js';
import { InvalidOptionsError } from '../../index.js';
import { HELP_FLAG, parseFlags, renderHelp, VERBOSE_FLAG, type FlagSpecs } from '../args.js';
import { ExitCode, UsageError, type Command } from '../command.js';

/**
 * `relaybus sql`: print the DDL without touching a database, for teams whose migrations are
 * applied by their own tooling: the whole schema (`createPostgresSchemaSql()`), or the bodies of the
 * two custom drizzle-kit migrations around drizzle-kit's own: `--adopt` before it, `--supplement` after.
 */

const FLAGS = {
  schema: { type: 'string', value: 'name', description: 'Postgres schema of the relaybus tables. Default: relaybus.' },
  adopt: {
    type: 'boolean',
    description:
      "Print the custom migration that goes before drizzle-kit's own: where relaybus setup already made the tables, it moves them aside for the supplement to put back (data kept); elsewhere it does nothing.",
  },
  supplement: {
    type: 'boolean',
    description:
      'Print only the supplement (tables the adopt migration moved aside put back, storage parameters, the 256 lane rows, the record of the relaybus migrations), with drizzle-kit statement breakpoints.',
  },
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

/** `relaybus sql`. */
export const sqlCommand: Command = {
  name: 'sql',
  summary: 'Print the relaybus DDL, or its drizzle-kit adopt or supplement migration.',
  help: renderHelp({
    usage: ['relaybus sql [--schema name] [--adopt | --supplement]'],
    description:
      'Print SQL to stdout; no database is needed. Without flags: the whole relaybus DDL as one script (the migrations, the supplement, and the rows that record the migrations as applied) for psql or your migration tool; start the bus with setupStore: false when you apply it yourself. With --adopt and --supplement: the custom migrations before and after drizzle-kit\'s own, for an application whose drizzle.config.ts lists a file that re-exports the relaybus tables (export * from "relaybus/schema").',
    flags: FLAGS,
    sections: [
      {
        title: 'With drizzle-kit',
        lines: [
          'npx drizzle-kit generate --custom --name relaybus-adopt',
          'relaybus sql --adopt > drizzle/<that file>.sql',
          'npx drizzle-kit generate                        # your tables and the relaybus tables',
          'npx drizzle-kit generate --custom --name relaybus-supplement',
          'relaybus sql --supplement > drizzle/<that file>.sql',
          'npx drizzle-kit migrate',
        ],
      },
      {
        title: 'Exit codes',
        lines: ['0  printed', '1  the package files (schema/migrations) could not be read', '2  usage error'],
      },
      {
        title: 'Examples',
        lines: ['relaybus sql | psql "$DATABASE_URL"', 'relaybus sql --schema events > relaybus.sql'],
      },
    ],
  }),
  async run(args, context) {
    const { values } = parseFlags('sql', args, FLAGS);
    const schema = values.schema ?? DEFAULT_SCHEMA;
    if (values.adopt && values.supplement)
      throw new UsageError('--adopt and --supplement print two different migrations: pass one.');
    try {
      context.stdout.write(
        values.adopt
          ? createPostgresAdoptSql({ schema })
          : values.supplement
            ? createPostgresSupplementSql({ schema })
            : createPostgresSchemaSql({ schema }),
      );
    } catch (error) {
      if (error instanceof InvalidOptionsError) throw new UsageError(`--schema: ${error.message}`);
      throw error;
    }
    return ExitCode.ok;
  },
};
