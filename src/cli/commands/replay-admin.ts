import type { ReplayState } from '../../index.js';
import {
  choiceFlag,
  DATABASE_FLAGS,
  HELP_FLAG,
  JSON_FLAG,
  parseFlags,
  renderHelp,
  VERBOSE_FLAG,
  type FlagSpecs,
} from '../args.js';
import { withAdminStore } from '../admin-store.js';
import { CliFailure, ExitCode, writeLine, type Command } from '../command.js';
import { REPLAY_COLUMNS, replayJson, replayLines, replayProgress } from '../replay-views.js';
import { writeTable } from '../table.js';
import { replayIdArgument } from './replay.js';

/** `relaybus replay cancel|list|show`: stop a running replay, and the audit record of every replay. */

const FLAGS = {
  ...JSON_FLAG,
  ...DATABASE_FLAGS,
  ...VERBOSE_FLAG,
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

const STATES = ['running', 'finished', 'cancelled'] as const satisfies readonly ReplayState[];

const LIST_FLAGS = {
  state: { type: 'string', value: 'state', description: 'Only replays in this state: running, finished or cancelled.' },
  ...FLAGS,
} as const satisfies FlagSpecs;

/** `relaybus replay cancel`. */
export const replayCancelCommand: Command = {
  name: 'replay cancel',
  summary: 'Stop a running replay: live deliveries flow again; the deliveries it created stay.',
  help: renderHelp({
    usage: ['relaybus replay cancel <id> [options]'],
    description:
      "Stop a running replay: it creates no more deliveries, and its handlers' live keyed deliveries that waited behind it run again at once. The deliveries it created stay and run (relaybus cancel withdraws one). A process driving the replay stops at its next step.",
    flags: FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: ['0  cancelled', '1  no such replay, it is not running, or the database failed', '2  usage error'],
      },
      { title: 'Examples', lines: ['relaybus replay cancel 12'] },
    ],
  }),
  async run(args, context) {
    const { values, positionals } = parseFlags('replay cancel', args, FLAGS, { maxPositionals: 1 });
    const id = replayIdArgument('replay cancel', positionals);
    return withAdminStore(values, context, async ({ store, schema }) => {
      const before = await store.getReplay(id);
      if (before === null)
        throw new CliFailure(`no replay ${id} in schema "${schema}" (relaybus replay list shows them)`);
      if (before.state !== 'running') {
        if (values.json) writeLine(context.stdout, JSON.stringify(replayJson(before)));
        throw new CliFailure(`replay ${id} is ${before.state}, not running; nothing changed`);
      }
      const after = await store.cancelReplay(id);
      if (after === null) throw new CliFailure(`no replay ${id} in schema "${schema}"`);
      if (values.json) writeLine(context.stdout, JSON.stringify(replayJson(after)));
      else
        writeLine(
          context.stdout,
          `cancelled replay ${id} (${after.mode} of ${after.handlers.join(', ')}) after ${replayProgress(after)} deliveries; the live deliveries of its handlers run again`,
        );
      if (after.state !== 'cancelled')
        throw new CliFailure(`replay ${id} ${after.state} before it could be cancelled; nothing changed`);
      return ExitCode.ok;
    });
  },
};

/** `relaybus replay list`. */
export const replayListCommand: Command = {
  name: 'replay list',
  summary: 'Every replay, newest first: who asked, why, what it covered, how far it got.',
  help: renderHelp({
    usage: ['relaybus replay list [--state <state>] [--json] [options]'],
    description:
      "List the replays, newest first (the latest 100): the audit record of who replayed what and when, with each one's state and deliveries created of those planned.",
    flags: LIST_FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: ['0  listed (also when there is none)', '1  the database failed', '2  usage error'],
      },
      { title: 'Examples', lines: ['relaybus replay list', 'relaybus replay list --state running --json'] },
    ],
  }),
  async run(args, context) {
    const { values } = parseFlags('replay list', args, LIST_FLAGS);
    const state = choiceFlag('state', values.state, STATES);
    return withAdminStore(values, context, async ({ store, schema }) => {
      const replays = await store.listReplays(state === undefined ? {} : { state });
      if (values.json) {
        writeLine(context.stdout, JSON.stringify(replays.map(replayJson), null, 2));
        return ExitCode.ok;
      }
      if (replays.length === 0) {
        writeLine(context.stdout, `no ${state === undefined ? '' : `${state} `}replay in schema "${schema}"`);
        return ExitCode.ok;
      }
      writeTable(context.stdout, REPLAY_COLUMNS, replays);
      return ExitCode.ok;
    });
  },
};

/** `relaybus replay show`. */
export const replayShowCommand: Command = {
  name: 'replay show',
  summary: 'One replay: its filter, state, progress and audit fields.',
  help: renderHelp({
    usage: ['relaybus replay show <id> [--json] [options]'],
    description:
      'Show one replay: mode, handlers, filter, who asked and why, its state, deliveries created of those planned and skipped, and when it started, last moved and finished. A running replay that has not moved for a minute is flagged: nobody drives it.',
    flags: FLAGS,
    sections: [
      { title: 'Exit codes', lines: ['0  shown', '1  no such replay, or the database failed', '2  usage error'] },
      { title: 'Examples', lines: ['relaybus replay show 12', 'relaybus replay show 12 --json'] },
    ],
  }),
  async run(args, context) {
    const { values, positionals } = parseFlags('replay show', args, FLAGS, { maxPositionals: 1 });
    const id = replayIdArgument('replay show', positionals);
    return withAdminStore(values, context, async ({ store, schema }) => {
      const replay = await store.getReplay(id);
      if (replay === null)
        throw new CliFailure(`no replay ${id} in schema "${schema}" (relaybus replay list shows them)`);
      if (values.json) writeLine(context.stdout, JSON.stringify(replayJson(replay), null, 2));
      else for (const line of replayLines(replay, Date.now())) writeLine(context.stdout, line);
      return ExitCode.ok;
    });
  },
};
