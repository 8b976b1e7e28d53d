import { basename } from 'node:path';
import {
  DEFAULT_POLL_INTERVAL_MS,
  RelayBusError,
  UnknownHandlerError,
  type DeadEvent,
  type FailedEvent,
  type Logger,
} from '../../index.js';
import type { DeliveryInfo } from '../../core/handlers.js';
import { laneOf } from '../../core/lanes.js';
import { MAX_FOLLOWERS } from '../../core/limits.js';
import { describeError } from '../../core/logger.js';
import { durationFlag, HELP_FLAG, integerFlag, listFlag, parseFlags, renderHelp, type FlagSpecs } from '../args.js';
import { CliFailure, ExitCode, UsageError, type CliContext, type Command } from '../command.js';
import {
  acceptsStartOptions,
  DEFAULT_CONFIG_NAMES,
  loadBus,
  resolveConfigPath,
  type WorkerBus,
  type WorkerStartOptions,
} from '../config-loader.js';
import { checkDatabaseUrl, DATABASE_URL, describeDatabaseUrl } from '../database-url.js';
import { waitUntilDrained } from '../drain-watch.js';
import { libraryLogger } from '../library-log.js';
import { closeStoreInTime, failingAs, FORCE_DEADLINE_MS, LOG_FLAGS, loggerFromFlags } from '../long-running.js';
import { decideParentWatch, EXIT_WITH_PARENT_ENV } from '../parent-policy.js';
import { watchParentIfDecided } from '../parent-watch.js';
import { serveWorkerMetrics, type WorkerMetrics } from '../metrics-server.js';
import { startWithRetry } from '../start-retry.js';
import { oneLine } from '../table.js';
import { onShutdownSignals, SHUTDOWN_SIGNALS, type ShutdownSignal } from '../signals.js';

/**
 * `relaybus worker [config]`: load the user's bus and run its dispatcher until SIGINT/SIGTERM (or,
 * with `--once`, until what is due is drained). The first signal stops gracefully through
 * `bus.stop()`: running handlers get the configured grace period, the rest are released without
 * charging an attempt and the lanes are handed back. A second signal cuts the grace period to zero
 * and exits 130/143 within `FORCE_DEADLINE_MS`. Losing the parent process stops gracefully too (exit
 * 129), but only when npm started the worker or `--exit-with-parent` asks (see parent-policy.ts).
 *
 * A database that is down does not end the worker: the start (the store's setup) and the claims
 * are retried with a capped backoff, one log line per failed attempt. Only errors a retry cannot
 * fix (`isRetryableError` false: bad credentials, a missing database, a newer schema) exit 1.
 */

/** How often `--once` looks at the statistics. */
const DRAIN_CHECK_MS = 200;
/** `--once` ends when due deliveries stayed unclaimable (keys behind a backing-off head) this long. */
const DRAIN_STALL_MIN_MS = 5_000;
const DAY_MS = 86_400_000;
const FLAGS = {
  concurrency: {
    type: 'string',
    value: 'n',
    description: "Handlers running at once, 1..1000. Default: the config's dispatcher.concurrency (10).",
  },
  'batch-size': {
    type: 'string',
    value: 'n',
    description: "Most deliveries per claim, 1..1000. Default: the config's (10).",
  },
  'poll-interval': {
    type: 'string',
    value: 'time',
    description: "Idle wait between claims, e.g. 500ms or 2s. Default: the config's (1s).",
  },
  'lease-duration': {
    type: 'string',
    value: 'time',
    description: "Lane lease, at least 100ms, e.g. 30s. Default: the config's (30s).",
  },
  'claim-loops': {
    type: 'string',
    value: 'n',
    description:
      "Claim loops, 1..8: each holds its own lanes, so claims overlap handler work. Default: the config's (1).",
  },
  followers: {
    type: 'string',
    value: 'n',
    description:
      "With each keyed head, claim up to n of its key's next due deliveries too, 0..100 (run in order, one after another). Default: the config's (0).",
  },
  handlers: {
    type: 'string',
    value: 'names',
    description: 'Run only these handlers (comma separated names given to bus.on). Default: all.',
  },
  once: { type: 'boolean', description: 'Drain what is due now, then stop and exit 0 (cron jobs, CI, backfills).' },
  'exit-with-parent': {
    type: 'boolean',
    description:
      'Stop (gracefully, exit 129) when the parent process exits. Default: only when npm started the worker (npx relaybus worker).',
  },
  ...LOG_FLAGS,
  verbose: {
    type: 'boolean',
    description: 'Log a line per delivered event (at info), and print stack traces on errors.',
  },
  'metrics-port': {
    type: 'string',
    value: 'port',
    description:
      'Serve /metrics (Prometheus), /healthz and /readyz on this port (0: any free port, logged). Default: off.',
  },
  'metrics-host': {
    type: 'string',
    value: 'host',
    description: 'Address the metrics server binds. Default: 127.0.0.1 (this machine only); 0.0.0.0 for a container.',
  },
  'metrics-interval': {
    type: 'string',
    value: 'time',
    description: 'How often the backlog metrics are sampled from the statistics, e.g. 5s. Default: 5s.',
  },
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

const HELP = renderHelp({
  usage: ['relaybus worker [config] [options]'],
  description: `Run the dispatcher of your bus: claim due deliveries, run their handlers, record the outcomes. [config] is an ES module whose default export is the bus (export default createRelayBus({ store, events }) plus its bus.on(...) calls); the same module your application imports to publish. Default: the first of ${DEFAULT_CONFIG_NAMES.join(', ')} in the current directory. .ts configs need tsx installed (npm install --save-dev tsx). The database connection is the one the config's store uses (typically DATABASE_URL; a value that is not a connection string is refused before anything connects).`,
  flags: FLAGS,
  sections: [
    {
      title: 'Stopping',
      lines: [
        'SIGINT (Ctrl-C) or SIGTERM stops gracefully: no new claims, running handlers get the',
        "bus's shutdownGraceMs (10s by default) to finish, unfinished ones are released without",
        "charging an attempt, and the worker's lanes are handed back to other workers at once.",
        `A second signal forces the stop: handlers are aborted now, and the worker exits within ${FORCE_DEADLINE_MS / 1000}s.`,
        '--once stops by itself when no delivery of its handlers is due or in flight (deliveries',
        'scheduled for later are left for the next run).',
      ],
    },
    {
      title: 'Database outages',
      lines: [
        'While the database cannot be reached (down, restarting, refusing connections) the worker',
        'keeps running: it retries the setup and the claims after 250ms, doubling up to 30s, and logs',
        'each failed attempt with the time of the next one, then "database reachable again".',
        'It exits 1 only on errors a retry cannot fix: bad credentials, an unknown database, a',
        'schema newer than this relaybus.',
      ],
    },
    {
      title: 'Logs',
      lines: [
        "debug and info lines go to stdout, warn and error lines to stderr; the library's own lines",
        '(dispatcher, setup, retries) use the same format. In containers, run the bin directly',
        "(node_modules/.bin/relaybus worker) so the runtime's SIGTERM reaches the worker; under",
        'npx (or an npm script that runs it) the worker notices that npm is gone and stops',
        'gracefully (exit 129). Started any other way (setsid, nohup ... &, a launcher that exits),',
        `it keeps running when its parent exits, unless --exit-with-parent or ${EXIT_WITH_PARENT_ENV}=1.`,
      ],
    },
    {
      title: 'Exit codes',
      lines: [
        '0    stopped gracefully (after a signal, or when --once had drained)',
        '1    runtime failure: the config module threw, the database refused the worker for good',
        '2    usage error: unknown flag, bad value, config module not found or without a bus,',
        '     DATABASE_URL not a connection string',
        '129  stopped gracefully because its parent process exited (npx signalled; see Logs)',
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
        'relaybus worker --log-format json --log-level warn',
        'relaybus worker --metrics-port 9464 --metrics-host 0.0.0.0   # Prometheus, probes',
      ],
    },
  ],
});

function overridesOf(values: ReturnType<typeof parseFlags<typeof FLAGS>>['values']): {
  options: WorkerStartOptions;
  flags: string[];
} {
  const dispatcher = {
    concurrency: integerFlag('concurrency', values.concurrency, 1, 1_000),
    batchSize: integerFlag('batch-size', values['batch-size'], 1, 1_000),
    pollIntervalMs: durationFlag('poll-interval', values['poll-interval'], 1, DAY_MS),
    leaseDurationMs: durationFlag('lease-duration', values['lease-duration'], 100, DAY_MS),
    claimLoops: integerFlag('claim-loops', values['claim-loops'], 1, 8),
    followers: integerFlag('followers', values.followers, 0, MAX_FOLLOWERS),
  };
  const given = Object.fromEntries(Object.entries(dispatcher).filter(([, value]) => value !== undefined));
  const handlers = listFlag('handlers', values.handlers);
  const flags = (
    ['concurrency', 'batch-size', 'poll-interval', 'lease-duration', 'claim-loops', 'followers', 'handlers'] as const
  ).filter((flag) => values[flag] !== undefined);
  return {
    options: { ...(Object.keys(given).length > 0 ? { dispatcher: given } : {}), ...(handlers ? { handlers } : {}) },
    flags: flags.map((flag) => `--${flag}`),
  };
}

/** Refuse per-run flags a bus cannot honour, and handler names it does not have. */
function checkOverrides(
  bus: WorkerBus,
  options: WorkerStartOptions,
  flags: readonly string[],
  configName: string,
): void {
  if (flags.length === 0) return;
  if (!acceptsStartOptions(bus)) {
    throw new UsageError(
      `${flags.join(', ')}: this relaybus version cannot override the bus from the command line; set them in ${configName} (createRelayBus({ dispatcher: { ... } }))`,
    );
  }
  const unknown = (options.handlers ?? []).filter((name) => !bus.handlers.includes(name));
  if (unknown.length > 0) {
    throw new UsageError(
      `--handlers: ${unknown.map((name) => `"${name}"`).join(', ')} ${unknown.length === 1 ? 'is' : 'are'} not registered on the bus of ${configName}; it has ${bus.handlers.join(', ')}`,
    );
  }
}

function withStack(
  fields: Record<string, unknown> | undefined,
  stack: { stack: string } | undefined,
): Record<string, unknown> | undefined {
  return stack === undefined ? fields : { ...fields, ...stack };
}

/** A line per failed attempt (warn) and per dead letter (error), per delivery at debug (info with --verbose); a count of every outcome. */
function reportOutcomes(
  bus: WorkerBus,
  log: Logger,
  verbose: boolean,
  structured: boolean,
): { readonly counts: { delivered: number; failed: number; dead: number }; dispose(): void } {
  const counts = { delivered: 0, failed: 0, dead: 0 };
  const describe = (error: unknown) => oneLine(describeError(error));
  // The stack follows the line only with --verbose (the library's own line about the attempt is at debug).
  const stackOf = (error: unknown) =>
    verbose && error instanceof Error && error.stack !== undefined ? { stack: error.stack } : undefined;
  // Structured too with --log-format json (the pretty line says it all already): delivery, handler, attempt, lane, error.
  const fieldsOf = (delivery: DeliveryInfo, error?: unknown) =>
    !structured
      ? undefined
      : {
          deliveryId: delivery.id,
          handler: delivery.handler,
          attempt: delivery.attempt,
          lane: laneOf(delivery.key, delivery.eventId),
          eventId: delivery.eventId,
          ...(error === undefined ? {} : { error: describe(error) }),
        };
  const offs = [
    bus.lifecycle.on('delivered', ({ delivery }) => {
      counts.delivered += 1;
      (verbose ? log.info : log.debug)(
        `${delivery.handler} delivered ${delivery.eventType} ${delivery.eventId} (delivery ${delivery.id})`,
        fieldsOf(delivery),
      );
    }),
    bus.lifecycle.on('failed', ({ delivery, error, retryAt }: FailedEvent) => {
      counts.failed += 1;
      log.warn(
        `${delivery.handler} failed on delivery ${delivery.id} (attempt ${delivery.attempt}/${delivery.maxAttempts}), retry at ${retryAt.toISOString()}: ${describe(error)}`,
        withStack(fieldsOf(delivery, error), stackOf(error)),
      );
    }),
    bus.lifecycle.on('dead', ({ delivery, error }: DeadEvent) => {
      counts.dead += 1;
      log.error(
        `${delivery.handler} failed its last attempt on delivery ${delivery.id} (${delivery.eventType} ${delivery.eventId}); it is dead until requeued (relaybus dead requeue --id ${delivery.id}): ${describe(error)}`,
        withStack(fieldsOf(delivery, error), stackOf(error)),
      );
    }),
    bus.lifecycle.on('lease-lost', ({ delivery }) => {
      log.warn(`lost the lane lease of delivery ${delivery.id}; it runs again on another worker`, fieldsOf(delivery));
    }),
  ];
  return { counts, dispose: () => offs.forEach((off) => off()) };
}

/** Log the store's dropped idle connections, where the store reports them (`onConnectionError`). */
function reportConnectionErrors(bus: WorkerBus, log: Logger): () => void {
  const store = bus.store as { onConnectionError?: unknown };
  if (typeof store.onConnectionError !== 'function') return () => {};
  const off: unknown = store.onConnectionError.call(store, (error: unknown) => {
    log.warn('a database connection failed while idle; the pool opens a new one when needed', {
      error: describeError(error),
    });
  });
  return typeof off === 'function' ? () => void off() : () => {};
}

/** Where the worker's bus keeps its data, for the start line: store kind, schema, DATABASE_URL without the password. */
function describeStore(bus: WorkerBus, env: CliContext['env']): string {
  const { kind } = bus.store;
  const schema = (bus.store as { schema?: unknown }).schema;
  const url = describeDatabaseUrl(env);
  const parts = [`${kind} store`];
  if (typeof schema === 'string') parts.push(`schema ${schema}`);
  if (kind !== 'memory') parts.push(url === undefined ? `${DATABASE_URL} is not set` : `${DATABASE_URL} ${url}`);
  return parts.join(', ');
}

/** The one-line error of a start a retry cannot fix. */
function startFailure(error: unknown, bus: WorkerBus, env: CliContext['env']): CliFailure {
  const message = oneLine(error instanceof Error ? error.message : String(error));
  const unset = env[DATABASE_URL] === undefined || env[DATABASE_URL] === '';
  if (
    unset &&
    bus.store.kind === 'postgres' &&
    error instanceof RelayBusError &&
    error.code === 'RELAYBUS_STORE_UNAVAILABLE'
  ) {
    return new CliFailure(`${DATABASE_URL} is not set, and the store could not connect without it: ${message}`, {
      cause: error,
    });
  }
  return new CliFailure(`the worker could not start: ${message}`, { cause: error });
}

async function runWorker(args: readonly string[], context: CliContext): Promise<number> {
  const parentAtStart = process.ppid;
  const { values, positionals } = parseFlags('worker', args, FLAGS, { maxPositionals: 1 });
  const log = loggerFromFlags(values, context, 'relaybus worker');
  const verbose = values.verbose === true || context.verbose;
  // Before the config loads: a launcher that exits meanwhile must not look like npm.
  const parent = decideParentWatch({ env: context.env, flag: values['exit-with-parent'], ppid: parentAtStart });
  const { options, flags } = overridesOf(values);
  const metricsPort = integerFlag('metrics-port', values['metrics-port'], 0, 65_535);
  const metricsIntervalMs = durationFlag('metrics-interval', values['metrics-interval'], 100, DAY_MS) ?? 5_000;
  if (metricsPort === undefined && (values['metrics-host'] !== undefined || values['metrics-interval'] !== undefined)) {
    throw new UsageError('--metrics-host and --metrics-interval go with --metrics-port <port>');
  }
  const configPath = resolveConfigPath(positionals[0], context.cwd);
  checkDatabaseUrl(context.env); // before the config module is imported: it may connect at once
  const configName = basename(configPath);
  const bus = await loadBus(configPath);
  checkOverrides(bus, options, flags, configName);
  const handlers = options.handlers ?? (acceptsStartOptions(bus) ? bus.handlers : undefined);
  const outcomes = reportOutcomes(bus, log, verbose, values['log-format'] === 'json');
  const stopReportingConnections = reportConnectionErrors(bus, log);
  const metrics: WorkerMetrics | undefined =
    metricsPort === undefined
      ? undefined
      : serveWorkerMetrics(bus, {
          port: metricsPort,
          host: values['metrics-host'] ?? '127.0.0.1',
          statisticsIntervalMs: metricsIntervalMs,
          logger: log,
        });
  await metrics?.started;
  const running = handlers
    ? `${handlers.length} handler${handlers.length === 1 ? '' : 's'} (${handlers.join(', ')})`
    : 'the bus';
  log.info(`starting ${running} from ${configName}: ${describeStore(bus, context.env)}`);

  let settle!: (code: number) => void;
  let fail!: (error: unknown) => void;
  const finished = new Promise<number>((resolve, reject) => {
    settle = resolve;
    fail = reject;
  });
  /** Aborted by the first stop request: ends the start retries and the --once watch. */
  const stopAsked = new AbortController();
  let stopping: Promise<void> | undefined;
  let drainError: unknown;
  let forcedBy: ShutdownSignal | undefined;
  let parentExited = false;
  const stopGracefully = (why: string): void => {
    if (stopping !== undefined) return;
    stopAsked.abort();
    log.info(`${why}; stopping gracefully (a second SIGINT/SIGTERM forces the stop)`);
    stopping = bus.stop();
    const code = () =>
      forcedBy !== undefined ? SHUTDOWN_SIGNALS[forcedBy] : parentExited ? ExitCode.parentExited : ExitCode.ok;
    stopping.then(() => settle(code()), fail);
  };
  const disposeSignals = onShutdownSignals({
    graceful: (signal) => stopGracefully(`${signal} received`),
    force: (signal: ShutdownSignal) => {
      forcedBy = signal;
      log.warn(`${signal} received again; forcing the stop (running handlers are aborted)`);
      bus.stop({ graceMs: 0 }).catch(() => {});
      setTimeout(() => settle(SHUTDOWN_SIGNALS[signal]), FORCE_DEADLINE_MS);
    },
  });
  const stopWatchingParent = watchParentIfDecided(parent, log, parentAtStart, (was, now) => {
    parentExited = true;
    stopGracefully(
      `the parent process (pid ${was}) exited and left the worker to pid ${now}, as npm does when it is signalled (watched because ${parent.why}; exit code ${ExitCode.parentExited})`,
    );
  });

  try {
    // Per-run flags and the CLI's logger go to a bus whose start() takes options (see acceptsStartOptions).
    const startOptions: WorkerStartOptions | undefined = acceptsStartOptions(bus)
      ? { ...options, logger: libraryLogger(log, { verbose }) }
      : undefined;
    const unset = bus.store.kind !== 'memory' && describeDatabaseUrl(context.env) === undefined;
    try {
      await startWithRetry({
        start: () => bus.start(startOptions),
        logger: log,
        signal: stopAsked.signal,
        ...(unset ? { fields: { hint: `${DATABASE_URL} is not set` } } : {}),
      });
    } catch (error) {
      if (error instanceof UnknownHandlerError) throw new UsageError(`--handlers: ${error.message}`);
      if (stopping !== undefined) return await finished; // stopped while starting
      throw startFailure(error, bus, context.env);
    }
    if (stopping === undefined) {
      log.info(
        `running ${running} from ${configName} as owner ${bus.owner ?? '?'}${values.once ? '; --once: stops when nothing is due' : ''}`,
      );
    }

    if (values.once && stopping === undefined) {
      const pollMs = options.dispatcher?.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS;
      waitUntilDrained({
        statistics: () => bus.store.statistics(),
        handlers,
        progress: () => outcomes.counts.delivered + outcomes.counts.failed + outcomes.counts.dead,
        intervalMs: DRAIN_CHECK_MS,
        stallMs: Math.max(DRAIN_STALL_MIN_MS, 2 * pollMs),
        signal: stopAsked.signal,
      }).then(
        (result) => {
          if (result === 'drained') stopGracefully('--once: nothing is due');
          if (result === 'stalled')
            stopGracefully('--once: the deliveries still due wait behind a key that is backing off');
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
    log.info(`stopped; ${delivered} delivered, ${failed} failed attempt${failed === 1 ? '' : 's'}, ${dead} dead`);
    return code;
  } finally {
    disposeSignals();
    stopWatchingParent();
    stopReportingConnections();
    outcomes.dispose();
    await metrics?.close();
    await closeStoreInTime(bus.store);
  }
}

/** `relaybus worker`. */
export const workerCommand: Command = {
  name: 'worker',
  summary: 'Run the dispatcher of the bus your config module exports.',
  help: HELP,
  run: (args, context) => failingAs('worker', () => runWorker(args, context)),
};
