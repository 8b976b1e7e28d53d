import { createConsoleLogger, noopLogger, type PublishItem } from '../../index.js';
import { fromPglite, postgresStore, type PgliteLike } from '../../postgres/index.js';
import { HELP_FLAG, integerFlag, parseFlags, renderHelp, type FlagSpecs } from '../args.js';
import { CliFailure, ExitCode, writeLine, type CliContext, type Command } from '../command.js';
import { createDemoBus, demoOrder, demoPlan, DEMO_HANDLERS, OrderPlaced } from '../demo/scenario.js';
import { percent, readTableWrites, tableWritesTable, writesSince } from '../demo/write-evidence.js';
import { createProgress } from '../progress.js';
import { onShutdownSignals } from '../signals.js';
import { statisticsTable } from './stats.js';

/**
 * `relaybus demo`: the whole delivery path with no server and no setup. It starts an embedded
 * PGlite database (loaded on demand, so the CLI runs without it), publishes keyed sample orders
 * through the bus in a few transactions, runs the dispatcher until every delivery is completed or
 * dead, then prints the statistics and what Postgres's own counters saw.
 */

/** Orders published by default (three deliveries each). */
export const DEFAULT_DEMO_EVENTS = 3_000;
const MAX_DEMO_EVENTS = 100_000;
const PUBLISH_BATCH = 500;
/** The demo gives up when nothing is delivered for this long. */
const STALL_MS = 30_000;

const FLAGS = {
  events: {
    type: 'string',
    value: 'n',
    description: `Orders to publish, 10..${MAX_DEMO_EVENTS} (three deliveries each). Default: ${DEFAULT_DEMO_EVENTS}, or RELAYBUS_DEMO_EVENTS.`,
  },
  verbose: { type: 'boolean', description: "Print the library's warnings and errors, and stack traces on errors." },
  ...HELP_FLAG,
} as const satisfies FlagSpecs;

interface PgliteModule {
  readonly PGlite: {
    create(): Promise<PgliteLike & { query<Row>(text: string, params?: unknown[]): Promise<{ rows: Row[] }> }>;
  };
}

async function startPglite(): Promise<PgliteModule['PGlite']> {
  try {
    return ((await import('@electric-sql/pglite')) as unknown as PgliteModule).PGlite;
  } catch (error) {
    if ((error as { code?: unknown }).code === 'ERR_MODULE_NOT_FOUND') {
      throw new CliFailure(
        'relaybus demo runs on an embedded PGlite database, which is not installed here: npm install @electric-sql/pglite',
      );
    }
    throw error;
  }
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
const count = (n: number) => n.toLocaleString('en-US');

async function runDemo(args: readonly string[], context: CliContext): Promise<number> {
  const { values } = parseFlags('demo', args, FLAGS);
  const events =
    integerFlag('events', values.events ?? context.env.RELAYBUS_DEMO_EVENTS, 10, MAX_DEMO_EVENTS) ??
    DEFAULT_DEMO_EVENTS;
  const out = context.stdout;
  const started = performance.now();
  const plan = demoPlan(events);
  const total = events * DEMO_HANDLERS.length;
  writeLine(
    out,
    `relaybus demo: ${count(events)} keyed order events (${count(plan.customers)} customers) x ${DEMO_HANDLERS.length} handlers (${DEMO_HANDLERS.join(', ')}) on an embedded PGlite database`,
  );

  const PGlite = await startPglite();
  const db = await PGlite.create();
  const store = postgresStore({ driver: fromPglite(db, { closeWithStore: true }) });
  try {
    await store.setup();
    writeLine(out, `  started PGlite and set up schema "${store.schema}" in ${seconds(performance.now() - started)}`);

    const query = <Row>(text: string, params?: unknown[]) => db.query<Row>(text, params);
    const baseline = await readTableWrites(query, store.schema);
    const logger = context.verbose ? createConsoleLogger({ level: 'warn' }) : noopLogger;
    const { bus, tally } = createDemoBus(store, plan, logger);
    const publishStarted = performance.now();
    let transactions = 0;
    for (let first = 0; first < events; first += PUBLISH_BATCH) {
      const items: PublishItem<typeof OrderPlaced>[] = [];
      for (let i = first; i < Math.min(events, first + PUBLISH_BATCH); i += 1) {
        const order = demoOrder(plan, i);
        items.push({ event: OrderPlaced, payload: order, options: { key: order.customerId } });
      }
      await store.transaction((tx) => bus.publishMany(tx, items));
      transactions += 1;
    }
    writeLine(
      out,
      `  published ${count(events)} events (${count(total)} deliveries) in ${transactions} transaction${transactions === 1 ? '' : 's'} in ${seconds(performance.now() - publishStarted)}`,
    );

    const outcome = { delivered: 0, failed: 0, dead: 0 };
    let lastProgressAt = performance.now();
    let finished!: () => void;
    let interrupted: string | undefined;
    const done = new Promise<void>((resolve) => (finished = resolve));
    const progress = createProgress(out, 'delivering', total);
    const suffix = () => `retries ${outcome.failed}  dead ${outcome.dead}`;
    const onOutcome = (): void => {
      lastProgressAt = performance.now();
      progress.update(outcome.delivered + outcome.dead, suffix());
      if (outcome.delivered + outcome.dead >= total) finished();
    };
    bus.lifecycle.on('delivered', () => {
      outcome.delivered += 1;
      onOutcome();
    });
    bus.lifecycle.on('dead', () => {
      outcome.dead += 1;
      onOutcome();
    });
    bus.lifecycle.on('failed', () => {
      outcome.failed += 1;
      onOutcome();
    });
    const stallCheck = setInterval(() => {
      progress.update(outcome.delivered + outcome.dead, suffix());
      if (performance.now() - lastProgressAt > STALL_MS) finished();
    }, 250);
    const disposeSignals = onShutdownSignals({
      graceful: (signal) => {
        interrupted = signal;
        finished();
      },
      force: (signal) => {
        interrupted = signal;
        void bus.stop({ graceMs: 0 });
      },
    });

    const deliverStarted = performance.now();
    try {
      await bus.start();
      await done;
      progress.finish(suffix());
      await bus.stop();
    } finally {
      clearInterval(stallCheck);
      disposeSignals();
    }
    const deliverMs = performance.now() - deliverStarted;
    if (interrupted !== undefined)
      throw new CliFailure(
        `interrupted by ${interrupted} after ${count(outcome.delivered + outcome.dead)} of ${count(total)} deliveries`,
      );
    if (outcome.delivered + outcome.dead < total) {
      throw new CliFailure(
        `no delivery finished for ${STALL_MS / 1000} s (${count(outcome.delivered + outcome.dead)} of ${count(total)} done); rerun with --verbose to see the library's log`,
      );
    }
    writeLine(
      out,
      `  delivered ${count(outcome.delivered)} and dead-lettered ${count(outcome.dead)} of ${count(total)} deliveries in ${seconds(deliverMs)} ` +
        `(${count(Math.round((1000 * total) / deliverMs))}/s); ${count(outcome.failed)} failed attempts were retried`,
    );
    writeLine(
      out,
      `  per-key order: ${tally.orderViolations} violations in ${count(tally.attempts)} handler runs (each customer's orders reached each handler one at a time, in publish order)`,
    );

    const stats = await store.statistics();
    writeLine(out);
    writeLine(out, 'statistics (what relaybus stats prints; handlers with nothing left are not listed):');
    for (const line of statisticsTable(stats)) writeLine(out, `  ${line}`);

    const dead = (await store.listDeliveries({ status: 'dead', limit: 5 })).items;
    writeLine(out);
    writeLine(out, 'dead letters (relaybus dead list):');
    for (const delivery of dead) {
      writeLine(
        out,
        `  delivery ${delivery.id}: ${delivery.handler} for ${delivery.eventType} (key ${delivery.key}) after ${delivery.attempts}/${delivery.maxAttempts} attempts: ${delivery.lastError ?? ''}`,
      );
    }

    const writes = writesSince(baseline, await readTableWrites(query, store.schema));
    const deliveries = writes.find((row) => row.table === 'relaybus_deliveries');
    const lanes = writes.find((row) => row.table === 'relaybus_lanes');
    writeLine(out);
    writeLine(out, 'write evidence (pg_stat_user_tables: rows written while publishing and delivering):');
    for (const line of tableWritesTable(writes.filter((row) => row.inserted + row.updated + row.deleted > 0)))
      writeLine(out, `  ${line}`);
    if (deliveries && lanes) {
      writeLine(
        out,
        `  deliveries: ${count(deliveries.inserted)} inserted, ${count(deliveries.deleted)} deleted, ${count(deliveries.updated)} updated = ` +
          `${(deliveries.updated / Math.max(1, deliveries.inserted)).toFixed(3)} updates per delivery`,
      );
      writeLine(
        out,
        `    (${count(outcome.failed)} retries + ${count(outcome.dead)} dead letter${outcome.dead === 1 ? '' : 's'} = ${count(outcome.failed + outcome.dead)}: ` +
          'a successful delivery is inserted once, deleted once, never updated)',
      );
      writeLine(
        out,
        `  lanes: ${count(lanes.updated)} updates (${(lanes.updated / Math.max(1, total)).toFixed(3)} per delivery), ${percent(lanes.hotUpdated, lanes.updated)} HOT: ` +
          'claims record their batches in the 256 lane rows, which have no secondary index',
      );
    }
    writeLine(out);
    const ok = stats.pending === 0 && stats.inFlight === 0 && stats.dead === 1 && tally.orderViolations === 0;
    writeLine(
      out,
      `relaybus demo: ${ok ? 'done' : 'FAILED: unexpected counts above'} in ${seconds(performance.now() - started)}`,
    );
    return ok ? ExitCode.ok : ExitCode.failure;
  } finally {
    await store.close();
  }
}

/** `relaybus demo`. */
export const demoCommand: Command = {
  name: 'demo',
  summary: 'See the delivery path on an embedded database: no server, no setup.',
  help: renderHelp({
    usage: ['relaybus demo [--events n]'],
    description:
      'Start an embedded PGlite database (in this process; nothing to install or configure but the @electric-sql/pglite package), publish keyed order events through the bus in a few transactions, run the dispatcher with three handlers until every delivery is completed or dead, then print the statistics and the writes Postgres counted (pg_stat_user_tables): inserts, updates and deletes per table, updates per delivery, lane updates and their HOT share. One handler fails a few times to show retries, and one delivery ends dead. Takes a few seconds, about three of them to start PGlite.',
    flags: FLAGS,
    sections: [
      {
        title: 'Exit codes',
        lines: [
          '0  every delivery completed, except the one planned dead letter, in per-key order',
          '1  anything else (or interrupted)',
          '2  usage error',
        ],
      },
      {
        title: 'Examples',
        lines: ['npx relaybus demo', 'npm run demo -- --events 10000     # from a clone of the repository'],
      },
    ],
  }),
  run: runDemo,
};
