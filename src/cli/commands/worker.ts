import { basename } from 'node:path';
import { DEFAULT_POLL_INTERVAL_MS, RelayBusError, UnknownHandlerError, type DeadEvent, type FailedEvent } from '../../index.js';
import { durationFlag, HELP_FLAG, integerFlag, listFlag, parseFlags, renderHelp, type FlagSpecs } from '../args.js';
import { CliFailure, ExitCode, UsageError, writeLine, type CliContext, type Command } from '../command.js';
import { acceptsStartOptions, DEFAULT_CONFIG_NAMES, loadBus, resolveConfigPath, type WorkerBus, type WorkerStartOptions } from '../config-loader.js';
import { waitUntilDrained } from '../drain-watch.js';
import { oneLine } from '../table.js';
import { onShutdownSignals, SHUTDOWN_SIGNALS, type ShutdownSignal } from '../signals.js';

/**
 * `relaybus worker [config]`: load the user's bus and run its dispatcher until SIGINT/SIGTERM (or,
 * with `--once`, until what is due is drained). The first signal stops gracefully through
 * `bus.stop()`: running handlers get the configured grace period, the rest are released without
 * charging an attempt and the lanes are handed back. A second signal cuts the grace period to zero
 * and exits 130/143 within `FORCE_DEADLINE_MS`.
 */

/** After a second signal the worker exits within this long, whether or not the forced stop finished. */
export const FORCE_DEADLINE_MS = 3_000;
/** How often `--once` looks at the statistics. */
const DRAIN_CHECK_MS = 200;
/** `--once` ends when due deliveries stayed unclaimable (keys behind a backing-off head) this long. */
const DRAIN_STALL_MIN_MS = 5_000;
const DAY_MS = 86_400_000;
/** How long the worker waits for `store.close()` before exiting anyway. */
const CLOSE_DEADLINE_MS = 2_000;

/** Close the bus's store, giving up after `ms` (the process exits right after). */
async function closeWithin(bus: WorkerBus, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    bus.store.close().catch(() => {}),
    new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
  ]);
  clearTimeout(timer);
}

const FLAGS = {
  concurrency: { type: 'string', value: 'n', description: 'Handlers running at once, 1..1000. Default: the config\'s dispatcher.concurrency (10).' },
  'batch-size': { type: 'string', value: 'n', description: 'Most deliveries per claim, 1..1000. Default: the config\'s (10).' },
  'poll-interval': { type: 'string', value: 'time', description: 'Idle wait between claims, e.g. 500ms or 2s. Default: the config\'s (1s).' },
  'lease-duration': { type: 'string', value: 'time', description: 'Lane lease, at least 100ms, e.g. 30s. Default: the config\'s (30s).' },
  handlers: { type: 'string', value: 'names', description: 'Run only these handlers (comma separated names given to bus.on). Default: all.' },
  once: { type: 'boolean', description: 'Drain what is due now, then stop and exit 0 (cron jobs, CI, backfills).' },
  verbose: { type: 'boolean', description: 'Print a line per delivered event, and stack traces on errors.' },
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

const HELP = renderHelp({
  usage: ['relaybus worker [config] [options]'],
  description: `Run the dispatcher of your bus: claim due deliveries, run their handlers, record the outcomes. [config] is an ES module whose default export is the bus (export default createRelayBus({ store, events }) plus its bus.on(...) calls); the same module your application imports to publish. Default: the first of ${DEFAULT_CONFIG_NAMES.join(', ')} in the current directory. .ts configs need tsx installed (npm install --save-dev tsx). The database connection is the one the config's store uses (typically DATABASE_URL).`,
  flags: FLAGS,
  sections: [
    {
      title: 'Stopping',
      lines: [
        'SIGINT (Ctrl-C) or SIGTERM stops gracefully: no new claims, running handlers get the',
        'bus\'s shutdownGraceMs (10s by default) to finish, unfinished ones are released without',
        'charging an attempt, and the worker\'s lanes are handed back to other workers at once.',
        `A second signal forces the stop: handlers are aborted now, and the worker exits within ${FORCE_DEADLINE_MS / 1000}s.`,
        '--once stops by itself when no delivery of its handlers is due or in flight (deliveries',
        'scheduled for later are left for the next run).',
      ],
    },
    {
      title: 'Exit codes',
      lines: [
        '0    stopped gracefully (after a signal, or when --once had drained)',
        '1    runtime failure: the config module threw, the bus could not start, the database failed',
        '2    usage error: unknown flag, bad value, config module not found or without a bus',
        '130  forced by a second SIGINT',
        '143  forced by a second SIGTERM',
      ],
    },
    {
      title: 'Examples',
      lines: [
        'relaybus worker                                  # ./relaybus.config.{ts,js,mjs}',
        'relaybus worker dist/bus.js --concurrency 50',
        'relaybus worker --handlers send-receipt,update-ledger --once',
      ],
    },
  ],
});

function overridesOf(values: ReturnType<typeof parseFlags<typeof FLAGS>>['values']): { options: WorkerStartOptions; flags: string[] } {
  const dispatcher = {
    concurrency: integerFlag('concurrency', values.concurrency, 1, 1_000),
    batchSize: integerFlag('batch-size', values['batch-size'], 1, 1_000),
    pollIntervalMs: durationFlag('poll-interval', values['poll-interval'], 1, DAY_MS),
    leaseDurationMs: durationFlag('lease-duration', values['lease-duration'], 100, DAY_MS),
  };
  const given = Object.fromEntries(Object.entries(dispatcher).filter(([, value]) => value !== undefined));
  const handlers = listFlag('handlers', values.handlers);
  const flags = (['concurrency', 'batch-size', 'poll-interval', 'lease-duration', 'handlers'] as const).filter((flag) => values[flag] !== undefined);
  return {
    options: { ...(Object.keys(given).length > 0 ? { dispatcher: given } : {}), ...(handlers ? { handlers } : {}) },
    flags: flags.map((flag) => `--${flag}`),
  };
}

/** Refuse per-run flags a bus cannot honour, and handler names it does not have. */
function checkOverrides(bus: WorkerBus, options: WorkerStartOptions, flags: readonly string[], configName: string): void {
  if (flags.length === 0) return;
  if (!acceptsStartOptions(bus)) {
    throw new UsageError(`${flags.join(', ')}: this relaybus version cannot override the bus from the command line; set them in ${configName} (createRelayBus({ dispatcher: { ... } }))`);
  }
  const unknown = (options.handlers ?? []).filter((name) => !bus.handlers.includes(name));
  if (unknown.length > 0) {
    throw new UsageError(`--handlers: ${unknown.map((name) => `"${name}"`).join(', ')} ${unknown.length === 1 ? 'is' : 'are'} not registered on the bus of ${configName}; it has ${bus.handlers.join(', ')}`);
  }
}

/** One line per failed attempt and per dead letter, on stderr; a count of every outcome. */
function reportOutcomes(bus: WorkerBus, context: CliContext): { readonly counts: { delivered: number; failed: number; dead: number }; dispose(): void } {
  const counts = { delivered: 0, failed: 0, dead: 0 };
  const describe = (error: unknown) => oneLine(error instanceof Error ? `${error.name}: ${error.message}` : String(error));
  const offs = [
    bus.events.on('delivered', ({ delivery }) => {
      counts.delivered += 1;
      if (context.verbose) writeLine(context.stdout, `relaybus worker: ${delivery.handler} delivered ${delivery.eventType} ${delivery.eventId} (delivery ${delivery.id})`);
    }),
    bus.events.on('failed', ({ delivery, error, retryAt }: FailedEvent) => {
      counts.failed += 1;
      writeLine(context.stderr, `relaybus worker: ${delivery.handler} failed on delivery ${delivery.id} (attempt ${delivery.attempt}/${delivery.maxAttempts}), retry at ${retryAt.toISOString()}: ${describe(error)}`);
    }),
    bus.events.on('dead', ({ delivery, error }: DeadEvent) => {
      counts.dead += 1;
      writeLine(context.stderr, `relaybus worker: ${delivery.handler} failed its last attempt on delivery ${delivery.id} (${delivery.eventType} ${delivery.eventId}); it is dead until requeued (relaybus dead requeue --id ${delivery.id}): ${describe(error)}`);
    }),
    bus.events.on('lease-lost', ({ delivery }) => {
      writeLine(context.stderr, `relaybus worker: lost the lane lease of delivery ${delivery.id}; it runs again on another worker`);
    }),
  ];
  return { counts, dispose: () => offs.forEach((off) => off()) };
}

async function runWorker(args: readonly string[], context: CliContext): Promise<number> {
  const { values, positionals } = parseFlags('worker', args, FLAGS, { maxPositionals: 1 });
  const { options, flags } = overridesOf(values);
  const configPath = resolveConfigPath(positionals[0], context.cwd);
  const configName = basename(configPath);
  const bus = await loadBus(configPath);
  checkOverrides(bus, options, flags, configName);
  const handlers = options.handlers ?? (acceptsStartOptions(bus) ? bus.handlers : undefined);
  const outcomes = reportOutcomes(bus, context);

  let settle!: (code: number) => void;
  let fail!: (error: unknown) => void;
  const finished = new Promise<number>((resolve, reject) => {
    settle = resolve;
    fail = reject;
  });
  const drainAbort = new AbortController();
  let stopping: Promise<void> | undefined;
  let drainError: unknown;
  let forcedBy: ShutdownSignal | undefined;
  const stopGracefully = (why: string): void => {
    if (stopping !== undefined) return;
    drainAbort.abort();
    writeLine(context.stdout, `relaybus worker: ${why}; stopping gracefully (a second SIGINT/SIGTERM forces the stop)`);
    stopping = bus.stop();
    stopping.then(() => settle(forcedBy === undefined ? ExitCode.ok : SHUTDOWN_SIGNALS[forcedBy]), fail);
  };
  const disposeSignals = onShutdownSignals({
    graceful: (signal) => stopGracefully(`${signal} received`),
    force: (signal: ShutdownSignal) => {
      forcedBy = signal;
      writeLine(context.stderr, `relaybus worker: ${signal} received again; forcing the stop (running handlers are aborted)`);
      bus.stop({ graceMs: 0 }).catch(() => {});
      setTimeout(() => settle(SHUTDOWN_SIGNALS[signal]), FORCE_DEADLINE_MS);
    },
  });

  try {
    try {
      await bus.start(flags.length > 0 ? options : undefined);
    } catch (error) {
      if (error instanceof UnknownHandlerError) throw new UsageError(`--handlers: ${error.message}`);
      if (stopping !== undefined) return await finished; // stopped while starting
      throw error;
    }
    const running = handlers ? `${handlers.length} handler${handlers.length === 1 ? '' : 's'} (${handlers.join(', ')})` : 'the bus';
    writeLine(context.stdout, `relaybus worker: running ${running} from ${configName} as owner ${bus.owner ?? '?'}${values.once ? '; --once: stops when nothing is due' : ''}`);

    if (values.once && stopping === undefined) {
      const pollMs = options.dispatcher?.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS;
      waitUntilDrained({
        statistics: () => bus.store.statistics(),
        handlers,
        progress: () => outcomes.counts.delivered + outcomes.counts.failed + outcomes.counts.dead,
        intervalMs: DRAIN_CHECK_MS,
        stallMs: Math.max(DRAIN_STALL_MIN_MS, 2 * pollMs),
        signal: drainAbort.signal,
      }).then(
        (result) => {
          if (result === 'drained') stopGracefully('--once: nothing is due');
          if (result === 'stalled') stopGracefully('--once: the deliveries still due wait behind a key that is backing off');
        },
        (error: unknown) => {
          drainError = error;
          stopGracefully('--once could not read the statistics');
        },
      );
    }
    const code = await finished;
    if (drainError !== undefined) {
      const message = drainError instanceof Error ? drainError.message : String(drainError);
      throw new CliFailure(`--once could not read the statistics: ${message}`, { cause: drainError });
    }
    const { delivered, failed, dead } = outcomes.counts;
    writeLine(context.stdout, `relaybus worker: stopped; ${delivered} delivered, ${failed} failed attempt${failed === 1 ? '' : 's'}, ${dead} dead`);
    return code;
  } finally {
    disposeSignals();
    outcomes.dispose();
    await closeWithin(bus, CLOSE_DEADLINE_MS);
  }
}

/** `relaybus worker`. */
export const workerCommand: Command = {
  name: 'worker',
  summary: 'Run the dispatcher of the bus your config module exports.',
  help: HELP,
  async run(args, context) {
    try {
      return await runWorker(args, context);
    } catch (error) {
      if (error instanceof RelayBusError || error instanceof UsageError || error instanceof CliFailure) throw error;
      throw new CliFailure(`the worker failed: ${error instanceof Error ? error.message : String(error)}`, { cause: error });
    }
  },
};
