#!/usr/bin/env node
/**
 * The `relaybus` command: `worker` runs the dispatcher of the user's bus; `setup`, `sql`, `stats`,
 * `dead list`, `dead requeue`, `cancel`, `handlers pause|resume|list`, `replay backfill|redrive|resume|cancel|list|show`, `purge` and `dashboard` (the admin page) are admin commands over the public API; `demo` shows the
 * delivery path on an embedded database. Errors print one line, `relaybus: <message>`, on stderr
 * (a stack trace too with `--verbose`) and exit non-zero: 2 for usage errors, 1 otherwise.
 */
import { readFileSync, realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { RelayBusError } from '../index.js';
import { packageFile } from '../postgres/package-files.js';
import { wantsHelp, wrap } from './args.js';
import { CliFailure, ExitCode, UsageError, writeLine, type CliContext, type Command } from './command.js';
import { dashboardCommand } from './commands/dashboard.js';
import { deadListCommand, deadRequeueCommand } from './commands/dead.js';
import { demoCommand } from './commands/demo.js';
import { purgeCommand } from './commands/purge.js';
import { setupCommand } from './commands/setup.js';
import { sqlCommand } from './commands/sql.js';
import { statsCommand } from './commands/stats.js';
import { workerCommand } from './commands/worker.js';
import { inboxCommand } from './commands/inbox.js';
import { upgradeCommand } from './commands/upgrade.js';
import { subscriptionsCommand } from './commands/subscriptions.js';
import { cancelCommand } from './commands/cancel.js';
import { handlersListCommand, handlersPauseCommand, handlersResumeCommand } from './commands/handlers.js';
import { replayBackfillCommand, replayRedriveCommand, replayResumeCommand } from './commands/replay.js';
import { replayCancelCommand, replayListCommand, replayShowCommand } from './commands/replay-admin.js';

/** Every command, by the words typed after `relaybus`. */
export const COMMANDS: readonly Command[] = [
  workerCommand,
  inboxCommand,
  demoCommand,
  setupCommand,
  upgradeCommand,
  sqlCommand,
  statsCommand,
  deadListCommand,
  deadRequeueCommand,
  cancelCommand,
  handlersPauseCommand,
  handlersResumeCommand,
  handlersListCommand,
  replayBackfillCommand,
  replayRedriveCommand,
  replayResumeCommand,
  replayCancelCommand,
  replayListCommand,
  replayShowCommand,
  purgeCommand,
  dashboardCommand,
  subscriptionsCommand,
];

/** The package version, from package.json. */
export function version(): string {
  return (JSON.parse(readFileSync(packageFile('package.json'), 'utf8')) as { version: string }).version;
}

function topHelp(): string {
  const width = Math.max(...COMMANDS.map((command) => command.name.length));
  return [
    'Usage: relaybus <command> [options]',
    '',
    ...wrap(
      'relaybus is a transactional outbox and in-database event bus: events are published inside your database transaction and delivered to every handler, at least once, retried, dead-lettered, ordered per key.',
      80,
    ),
    '',
    'Commands:',
    ...COMMANDS.map((command) => `  ${command.name.padEnd(width)}  ${command.summary}`),
    '',
    'Options:',
    "  -h, --help     Show help; relaybus <command> --help shows a command's options.",
    '  -v, --version  Print the version.',
    '  --verbose      Print stack traces on errors.',
    '',
    'The admin commands (setup, upgrade, stats, dead, cancel, handlers, replay, purge, dashboard, subscriptions)',
    'connect to --database-url or DATABASE_URL and work on --schema (default relaybus).',
    'Durations are written 500ms, 30s, 15m, 12h, 7d (or plain milliseconds).',
    '',
    'Exit codes:',
    '  0    success',
    '  1    runtime failure (database, config module); the message says what failed',
    '  2    usage error (unknown command or flag, bad value, missing config module)',
    '  129  a worker (or inbox) stopped because its parent process exited (npm started it)',
    '  130  a worker (or inbox) forced to stop by a second SIGINT',
    '  143  a worker (or inbox) forced to stop by a second SIGTERM',
    '',
    'Start with: relaybus demo',
    '',
  ].join('\n');
}

/** The commands of two words (`dead list`), by their first word: what the group's help says about them. */
const GROUPS: Readonly<Record<string, { readonly about: string; readonly commands: readonly Command[] }>> = {
  dead: {
    about: 'Dead deliveries are the ones whose handler failed its last attempt.',
    commands: [deadListCommand, deadRequeueCommand],
  },
  handlers: {
    about:
      "A paused handler's deliveries are published and wait, in order, until it is resumed: no worker claims them.",
    commands: [handlersPauseCommand, handlersResumeCommand, handlersListCommand],
  },
  replay: {
    about:
      "A replay delivers kept events again, in each key's original order: to a handler added later (backfill) or to handlers that ran them (redrive). While it runs, its handlers' live keyed deliveries wait, so each key's history comes first.",
    commands: [
      replayBackfillCommand,
      replayRedriveCommand,
      replayResumeCommand,
      replayCancelCommand,
      replayListCommand,
      replayShowCommand,
    ],
  },
};

function groupHelp(group: string): string {
  const { about, commands } = GROUPS[group]!;
  const subcommands = commands.map((command) => command.name.slice(group.length + 1));
  const width = Math.max(...subcommands.map((name) => name.length));
  return [
    `Usage: relaybus ${group} <${subcommands.join('|')}> [options]`,
    '',
    ...wrap(about, 80),
    '',
    'Commands:',
    ...commands.map((command, i) => `  ${subcommands[i]!.padEnd(width)}  ${command.summary}`),
    '',
    ...wrap(
      `${listed(
        subcommands.map((name) => `relaybus ${group} ${name} --help`),
        'and',
      )} show their options.`,
      80,
    ),
    '',
  ].join('\n');
}

/** "a or b", "a, b or c" (or with "and"). */
function listed(names: readonly string[], word: 'or' | 'and' = 'or'): string {
  return names.length === 1 ? names[0]! : `${names.slice(0, -1).join(', ')} ${word} ${names.at(-1)}`;
}

/** The command `args` names, and the arguments after its name. */
function findCommand(
  args: readonly string[],
): { command: Command; rest: readonly string[] } | { help: string; usage?: string } {
  const [first, second] = args;
  if (first !== undefined && Object.hasOwn(GROUPS, first)) {
    const help = groupHelp(first);
    const subcommands = GROUPS[first]!.commands.map((command) => command.name.slice(first.length + 1));
    if (second === undefined || second.startsWith('-')) {
      return wantsHelp(args.slice(1))
        ? { help }
        : {
            help,
            usage: `relaybus ${first} needs a subcommand: ${listed(subcommands)} (see relaybus ${first} --help)`,
          };
    }
    const command = COMMANDS.find((candidate) => candidate.name === `${first} ${second}`);
    if (command === undefined)
      return {
        help,
        usage: `unknown command "${first} ${second}"; use ${listed(subcommands.map((name) => `relaybus ${first} ${name}`))}`,
      };
    return { command, rest: args.slice(2) };
  }
  const command = COMMANDS.find((candidate) => candidate.name === first);
  if (command === undefined) {
    return {
      help: topHelp(),
      usage: `unknown command "${first}"; commands: ${[...new Set(COMMANDS.map((c) => c.name.split(' ')[0]))].join(', ')} (see relaybus --help)`,
    };
  }
  return { command, rest: args.slice(1) };
}

/** The one-line message of `error`, with the cause's message when the error's own is empty. */
export function errorLine(error: unknown): string {
  const describe = (value: unknown): string => {
    if (value instanceof AggregateError && value.message === '')
      return value.errors.map(describe).filter(Boolean).join('; ');
    if (value instanceof Error) return value.message;
    return String(value);
  };
  let message = describe(error);
  if (message === '' && error instanceof Error && error.cause !== undefined) message = describe(error.cause);
  return (message || 'failed without a message (rerun with --verbose)').replace(/\s*\n\s*/g, ' ').trim();
}

function exitCodeOf(error: unknown): number {
  return error instanceof UsageError ? ExitCode.usage : ExitCode.failure;
}

function printStack(error: unknown, context: CliContext): void {
  let current: unknown = error;
  for (let depth = 0; current !== undefined && depth < 5; depth += 1) {
    const text = current instanceof Error ? (current.stack ?? `${current.name}: ${current.message}`) : String(current);
    writeLine(context.stderr, depth === 0 ? text : `caused by: ${text}`);
    current = current instanceof Error ? current.cause : undefined;
  }
}

/**
 * Run the CLI with `args` (without `node` and the script) and resolve with the exit code.
 *
 * ```ts
 * process.exit(await runCli(process.argv.slice(2)));
 * ```
 */
export async function runCli(
  args: readonly string[],
  base: Omit<CliContext, 'verbose'> = {
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    cwd: process.cwd(),
  },
): Promise<number> {
  const verbose = args.slice(0, args.includes('--') ? args.indexOf('--') : undefined).includes('--verbose');
  const context: CliContext = { ...base, verbose };
  const first = args[0];
  if (first === undefined) {
    context.stderr.write(topHelp());
    return ExitCode.usage;
  }
  if (first === '--version' || first === '-v') {
    writeLine(context.stdout, version());
    return ExitCode.ok;
  }
  if (first === '--help' || first === '-h' || first === 'help') {
    const topic = first === 'help' ? args.slice(1) : [];
    if (topic.length > 0) return runCli([...topic, '--help'], base);
    context.stdout.write(topHelp());
    return ExitCode.ok;
  }
  if (first.startsWith('-') && first !== '--verbose') {
    writeLine(
      context.stderr,
      `relaybus: unknown option ${first} before the command; usage: relaybus <command> [options] (see relaybus --help)`,
    );
    return ExitCode.usage;
  }
  const commandArgs = first === '--verbose' ? args.slice(1) : args;
  if (commandArgs.length === 0) {
    context.stderr.write(topHelp());
    return ExitCode.usage;
  }
  const found = findCommand(commandArgs);
  if ('help' in found) {
    if (found.usage === undefined) {
      context.stdout.write(found.help);
      return ExitCode.ok;
    }
    writeLine(context.stderr, `relaybus: ${found.usage}`);
    return ExitCode.usage;
  }
  if (wantsHelp(found.rest)) {
    context.stdout.write(found.command.help);
    return ExitCode.ok;
  }
  try {
    return await found.command.run(found.rest, context);
  } catch (error) {
    const expected = error instanceof UsageError || error instanceof CliFailure || error instanceof RelayBusError;
    writeLine(
      context.stderr,
      `relaybus: ${errorLine(error)}${expected || verbose ? '' : ' (unexpected: rerun with --verbose for the stack trace)'}`,
    );
    if (verbose) printStack(error, context);
    return exitCodeOf(error);
  }
}

function isEntryPoint(): boolean {
  const script = process.argv[1];
  if (script === undefined) return false;
  try {
    return import.meta.url === pathToFileURL(realpathSync(script)).href;
  } catch {
    return false;
  }
}

if (isEntryPoint()) {
  const code = await runCli(process.argv.slice(2));
  // Exit explicitly: a user's config may leave pools, servers or timers open after the bus stopped.
  process.exit(code);
}
