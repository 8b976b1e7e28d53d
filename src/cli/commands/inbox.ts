import { basename } from 'node:path';
import { pathToFileURL } from 'node:url';
import { setTimeout as sleep } from 'node:timers/promises';
import { isRetryableError, type Logger } from '../../index.js';
import { describeError } from '../../core/logger.js';
import { RetryBackoff } from '../../core/retry-backoff.js';
import { lendInboxLogger } from '../../broker/inbox-logger.js';
import type { Inbox } from '../../broker/inbox-types.js';
import { durationFlag, HELP_FLAG, parseFlags, renderHelp, type FlagSpecs } from '../args.js';
import { CliFailure, ExitCode, UsageError, type CliContext, type Command } from '../command.js';
import { DEFAULT_CONFIG_NAMES, loadBus, resolveConfigPath, type WorkerBus } from '../config-loader.js';
import { checkDatabaseUrl } from '../database-url.js';
import { libraryLogger } from '../library-log.js';
import { closeStoreInTime, failingAs, FORCE_DEADLINE_MS, LOG_FLAGS, loggerFromFlags } from '../long-running.js';
import { decideParentWatch } from '../parent-policy.js';
import { watchParentIfDecided } from '../parent-watch.js';
import { onShutdownSignals, SHUTDOWN_SIGNALS, type ShutdownSignal } from '../signals.js';
import { oneLine } from '../table.js';

/**
 * `relaybus inbox [config]`: run the inbox side of the config module (its `inbox` export: one inbox
 * made by `amqpInbox`/`natsInbox`/`kafkaInbox`, or a list) until SIGINT/SIGTERM. Same conventions as `worker`:
 * the first signal stops gracefully (held messages finish within the grace period, the rest go back
 * to the broker), a second forces it (exit 130/143); a broker or database that is down at start is
 * retried with a capped backoff, and only an error a retry cannot fix (a bad login, a queue,
 * stream, consumer or topic that does not exist) exits 1. Handlers of the events run in `relaybus worker`.
 */

const DAY_MS = 86_400_000;

const FLAGS = {
  grace: {
    type: 'string',
    value: 'time',
    description:
      "How long held messages may take to finish on stop, e.g. 10s. Default: each inbox's shutdownGraceMs (10s).",
  },
  'exit-with-parent': {
    type: 'boolean',
    description:
      'Stop (gracefully, exit 129) when the parent process exits. Default: only when npm started the inbox (npx relaybus inbox).',
  },
  ...LOG_FLAGS,
  verbose: {
    type: 'boolean',
    description: 'Log a line per committed batch (at info), and print stack traces on errors.',
  },
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

const HELP = renderHelp({
  usage: ['relaybus inbox [config] [options]'],
  description: `Run the inbox side of your config module: consume the broker (a RabbitMQ queue, a NATS JetStream durable consumer, Kafka topics as a consumer group) and turn each message into an event of your bus, in one database transaction per batch, acknowledged after the commit (a redelivery is deduplicated by the message id). [config] is the module relaybus worker loads (default: the first of ${DEFAULT_CONFIG_NAMES.join(', ')}); besides its default export (the bus), it exports \`inbox\`: an inbox made by amqpInbox (relaybus/amqp), natsInbox (relaybus/nats) or kafkaInbox (relaybus/kafka), or a list of them. The handlers of those events run in relaybus worker.`,
  flags: FLAGS,
  sections: [
    {
      title: 'Stopping',
      lines: [
        'SIGINT (Ctrl-C) or SIGTERM stops gracefully: no new messages, held ones finish within the',
        'grace period, the rest go back to the broker unacknowledged (redelivered later).',
        `A second signal forces the stop; the inbox exits within ${FORCE_DEADLINE_MS / 1000}s (the broker redelivers what it held).`,
      ],
    },
    {
      title: 'Outages',
      lines: [
        'A broker or database that cannot be reached at start is retried after 250ms, doubling up to',
        '30s, with a log line per attempt. Once running, a lost broker connection is reconnected and a',
        'failing database is retried in place; nothing is acknowledged before its commit.',
        'Poison messages (no id, a payload that breaks its schema, an id taken by another event) go',
        'to the dead-letter route with their reason and are logged at error.',
      ],
    },
    {
      title: 'Exit codes',
      lines: [
        '0    stopped gracefully (after a signal)',
        '1    runtime failure: the config module threw, a queue/stream/consumer/topic does not exist, a',
        '     login was refused',
        '2    usage error: unknown flag, bad value, config module not found, without a bus or an inbox',
        '129  stopped gracefully because its parent process exited (npm started it and was signalled)',
        '130  forced by a second SIGINT',
        '143  forced by a second SIGTERM',
      ],
    },
    {
      title: 'Examples',
      lines: [
        'relaybus inbox                          # ./relaybus.config.{ts,js,mjs}, its `inbox` export',
        'relaybus inbox dist/bus.js --grace 30s',
        'relaybus inbox --log-format json',
      ],
    },
  ],
});

function isInbox(value: unknown): value is Inbox {
  if (typeof value !== 'object' || value === null) return false;
  const candidate = value as Record<string, unknown>;
  return (
    typeof candidate.start === 'function' &&
    typeof candidate.stop === 'function' &&
    typeof candidate.name === 'string' &&
    typeof candidate.lifecycle === 'object' &&
    candidate.lifecycle !== null
  );
}

/** The `inbox` export of the (already loaded) config module: one inbox or a list. */
async function loadInboxes(path: string): Promise<Inbox[]> {
  const module = (await import(pathToFileURL(path).href)) as { inbox?: unknown; default?: { inbox?: unknown } };
  const exported = module.inbox ?? module.default?.inbox;
  const list = Array.isArray(exported) ? (exported as unknown[]) : exported === undefined ? [] : [exported];
  if (list.length === 0) {
    throw new UsageError(
      `${basename(path)} exports no inbox; add export const inbox = amqpInbox({ bus, url, queue, events }) (relaybus/amqp), natsInbox(...) (relaybus/nats) or kafkaInbox(...) (relaybus/kafka)`,
    );
  }
  const bad = list.findIndex((item) => !isInbox(item));
  if (bad >= 0)
    throw new UsageError(
      `${basename(path)}: inbox${list.length > 1 ? `[${bad}]` : ''} is not an inbox made by amqpInbox, natsInbox or kafkaInbox`,
    );
  return list as Inbox[];
}

/** Start `inbox`, retrying what a retry can fix (broker or database down) until `signal` aborts. */
async function startWithBackoff(inbox: Inbox, log: Logger, signal: AbortSignal): Promise<'started' | 'stopped'> {
  const backoff = new RetryBackoff();
  for (;;) {
    if (signal.aborted) return 'stopped';
    try {
      await inbox.start();
      if (backoff.failures > 0)
        log.info(`${inbox.name} started after ${backoff.failures} failed attempt${backoff.failures === 1 ? '' : 's'}`);
      return 'started';
    } catch (error) {
      if (signal.aborted) return 'stopped';
      if (!isRetryableError(error)) throw error;
      const delayMs = backoff.failed();
      log.warn(`${inbox.name} could not start; starting again after a backoff`, {
        attempt: backoff.failures,
        retryInMs: delayMs,
        error: oneLine(describeError(error)),
      });
      try {
        await sleep(delayMs, undefined, { signal });
      } catch {
        return 'stopped';
      }
    }
  }
}

const plural = (count: number, noun: string) => `${count} ${noun}${count === 1 ? '' : 's'}`;

/** `committed 6 messages: 0 new events, 6 already seen` (a message already seen is a redelivery, its event exists). */
export function committedLine(messages: number, alreadySeen: number): string {
  return `committed ${plural(messages, 'message')}: ${plural(messages - alreadySeen, 'new event')}, ${alreadySeen} already seen`;
}

/**
 * Log lines for what the inboxes do; counts for the last line. An inbox that logs through the CLI's
 * logger (`lent`) says itself what went wrong or came back; the CLI says it for the others.
 */
function report(inboxes: readonly Inbox[], log: Logger, verbose: boolean, lent: ReadonlySet<Inbox>) {
  const counts = { committed: 0, duplicates: 0, dead: 0 };
  const offs = inboxes.flatMap((inbox) => [
    inbox.lifecycle.on('committed', ({ messages }) => {
      counts.committed += messages.length;
      const duplicates = messages.filter((m) => m.duplicate).length;
      counts.duplicates += duplicates;
      (verbose ? log.info : log.debug)(`${inbox.name}: ${committedLine(messages.length, duplicates)}`);
    }),
    inbox.lifecycle.on('dead-lettered', ({ message, reason, detail }) => {
      counts.dead += 1;
      if (lent.has(inbox)) return;
      log.error(
        `${inbox.name}: dead-lettered message ${message.id ?? '(no id)'} from ${message.source}: ${reason}: ${oneLine(detail)}`,
      );
    }),
    inbox.lifecycle.on('retrying', ({ error, delayMs, attempt, messages }) => {
      if (lent.has(inbox)) return;
      log.warn(`${inbox.name}: the database failed a batch of ${messages}; retrying it in place (unacknowledged)`, {
        attempt,
        retryInMs: delayMs,
        error: oneLine(describeError(error)),
      });
    }),
    inbox.lifecycle.on('held-back', ({ outstanding, ackWaitMs }) => {
      if (lent.has(inbox)) return;
      log.info(
        `${inbox.name}: ${outstanding} messages delivered before are unacknowledged; newer ones wait for their redelivery (ack wait ${ackWaitMs} ms), then all go in stream order`,
      );
    }),
    inbox.lifecycle.on('disconnected', ({ error, retryInMs }) => {
      if (lent.has(inbox)) return;
      log.warn(`${inbox.name}: lost the broker connection; reconnecting`, {
        retryInMs,
        error: oneLine(describeError(error)),
      });
    }),
    inbox.lifecycle.on('connected', ({ reconnect }) => {
      if (reconnect && !lent.has(inbox)) log.info(`${inbox.name}: reconnected`);
    }),
  ]);
  return { counts, dispose: () => offs.forEach((off) => off()) };
}

async function runInbox(args: readonly string[], context: CliContext): Promise<number> {
  const parentAtStart = process.ppid;
  const { values, positionals } = parseFlags('inbox', args, FLAGS, { maxPositionals: 1 });
  const log = loggerFromFlags(values, context, 'relaybus inbox');
  const parent = decideParentWatch({ env: context.env, flag: values['exit-with-parent'], ppid: parentAtStart });
  const graceMs = durationFlag('grace', values.grace, 0, DAY_MS);
  const configPath = resolveConfigPath(positionals[0], context.cwd);
  checkDatabaseUrl(context.env);
  const configName = basename(configPath);
  const bus: WorkerBus = await loadBus(configPath);
  const inboxes = await loadInboxes(configPath);
  const verbose = values.verbose === true || context.verbose;
  // An inbox made without a logger logs through the CLI's: --log-level, --log-format and --verbose reach its lines.
  const lent = new Set(inboxes.filter((inbox) => lendInboxLogger(inbox, libraryLogger(log, { verbose }))));
  for (const inbox of inboxes)
    if (!lent.has(inbox)) log.debug(`${inbox.name} logs through the logger its options gave`);
  const outcomes = report(inboxes, log, verbose, lent);
  log.info(`starting ${inboxes.map((inbox) => inbox.name).join(', ')} from ${configName}`);

  let settle!: (code: number) => void;
  let fail!: (error: unknown) => void;
  const finished = new Promise<number>((resolve, reject) => {
    settle = resolve;
    fail = reject;
  });
  const stopAsked = new AbortController();
  let stopping: Promise<unknown> | undefined;
  let forcedBy: ShutdownSignal | undefined;
  let parentExited = false;
  const stopAll = (grace: number | undefined) =>
    Promise.all(inboxes.map((inbox) => inbox.stop(grace === undefined ? {} : { graceMs: grace })));
  const stopGracefully = (why: string): void => {
    if (stopping !== undefined) return;
    stopAsked.abort();
    log.info(`${why}; stopping gracefully (a second SIGINT/SIGTERM forces the stop)`);
    stopping = stopAll(graceMs);
    const code = () =>
      forcedBy !== undefined ? SHUTDOWN_SIGNALS[forcedBy] : parentExited ? ExitCode.parentExited : ExitCode.ok;
    stopping.then(() => settle(code()), fail);
  };
  const disposeSignals = onShutdownSignals({
    graceful: (signal) => stopGracefully(`${signal} received`),
    force: (signal) => {
      forcedBy = signal;
      log.warn(`${signal} received again; forcing the stop (held messages go back to the broker)`);
      stopAll(0).catch(() => {});
      setTimeout(() => settle(SHUTDOWN_SIGNALS[signal]), FORCE_DEADLINE_MS).unref();
    },
  });
  const stopWatchingParent = watchParentIfDecided(parent, log, parentAtStart, (was, now) => {
    parentExited = true;
    stopGracefully(
      `the parent process (pid ${was}) exited and left the inbox to pid ${now} (watched because ${parent.why}; exit code ${ExitCode.parentExited})`,
    );
  });

  try {
    for (const inbox of inboxes) {
      try {
        if ((await startWithBackoff(inbox, log, stopAsked.signal)) === 'stopped') break;
      } catch (error) {
        if (stopping !== undefined) break;
        throw new CliFailure(
          `${inbox.name} could not start: ${oneLine(error instanceof Error ? error.message : String(error))}`,
          { cause: error },
        );
      }
    }
    if (stopping === undefined)
      log.info(`running ${inboxes.length} inbox${inboxes.length === 1 ? '' : 'es'} from ${configName}`);
    const code = await finished;
    const { committed, duplicates, dead } = outcomes.counts;
    log.info(`stopped; ${committedLine(committed, duplicates)}; ${dead} dead-lettered`);
    return code;
  } finally {
    disposeSignals();
    stopWatchingParent();
    outcomes.dispose();
    if (stopping === undefined) await stopAll(0).catch(() => {});
    await closeStoreInTime(bus.store);
  }
}

/** `relaybus inbox`. */
export const inboxCommand: Command = {
  name: 'inbox',
  summary: 'Run the broker inboxes your config module exports (RabbitMQ, NATS, Kafka).',
  help: HELP,
  run: (args, context) => failingAs('inbox', () => runInbox(args, context)),
};
