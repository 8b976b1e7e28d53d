/**
 * relaybus itself: the real bus and dispatcher (createRelayBus + postgresStore over `pg`), the
 * same code a user runs with `npx relaybus worker`, loaded from the compiled `dist/` (as the peers
 * run compiled JavaScript from node_modules; the orchestrator builds it first when src/ is newer,
 * see bench/lib/build.ts). Types come from src/. Publishing goes through `bus.publishMany` in the
 * caller's transaction (a pg client after BEGIN), or, per publish variant (PUBLISH_VARIANTS), through
 * the other paths a user has: without NOTIFY, fanned out from the stored subscriptions, or from SQL.
 */
import { pathToFileURL } from 'node:url';
import pg from 'pg';
import type * as Api from '../../src/index.js';
import type * as PgApi from '../../src/postgres/index.js';
import type * as TelemetryApi from '../../src/telemetry/opentelemetry.js';
import {
  HANDLERS,
  handlerIndex,
  pairsOf,
  type Contender,
  type DispatcherHooks,
  type DispatcherSettings,
  type PublisherHandle,
} from '../lib/types.js';
import { inTransaction, warmPool } from '../lib/db.js';

/**
 * Loaded as `relaybus.js?base` (the `relaybus-base` contender), this module runs another build of relaybus: the dist/
 * of the checkout RELAYBUS_BASE_DIST names (built, with its sql/), for a before/after pair in one interleaved run.
 */
const isBase = new URL(import.meta.url).searchParams.has('base');
function distRoot(): URL {
  if (!isBase) return new URL('../../', import.meta.url);
  const checkout = process.env.RELAYBUS_BASE_DIST;
  if (!checkout)
    throw new Error(
      'relaybus-base needs RELAYBUS_BASE_DIST: a checkout of the revision to compare, built (npm run build)',
    );
  return pathToFileURL(`${checkout.replace(/\/$/, '')}/`);
}
const root = distRoot();
const dist = (path: string) => new URL(`dist/src/${path}`, root).href;
const api = (await import(dist('index.js'))) as typeof Api;
const pgApi = (await import(dist('postgres/index.js'))) as typeof PgApi;
const { createRelayBus, defineEvent, Type, DEFAULT_MAX_ATTEMPTS } = api;
const { fromPg, postgresStore } = pgApi;

const BenchEvent = defineEvent('bench.event', Type.Object({ i: Type.Integer() }));

/**
 * The publish paths the publish scenario measures (an entry's variant):
 * - default: bus.publish / publishMany without an id (as pg-boss and graphile-worker are called: the library makes
 *   the id), the publisher registers the handlers, NOTIFY on (the store's default); the events are published inline
 *   (no events row, the deliveries carry them);
 * - ids: the same with an id per event (`e<i>`), as an inbox or a caller that needs dedup does: an events row each;
 * - no-notify: the same with postgresStore({ notify: false }): what the NOTIFY at commit costs;
 * - keep-events: the default path on postgresStore({ keepEvents: true }): an events row for every event, though
 *   none has an id of the caller's (what keeping every event until retention costs);
 * - subscriptions: the publisher registers no handler; the fan-out comes from the subscriptions
 *   recorded in the database (setup records them, as a started worker would);
 * - sql: `relaybus_publish(type, payload, key, id)` from SQL, one statement per transaction (a batch
 *   over unnest of arrays), fanned out from the same recorded subscriptions.
 */
export const PUBLISH_VARIANTS = ['default', 'ids', 'no-notify', 'keep-events', 'subscriptions', 'sql'] as const;
export type PublishVariant = (typeof PUBLISH_VARIANTS)[number];

function publishVariantOf(variant: string | undefined): PublishVariant {
  if (variant === undefined) return 'default';
  if (!(PUBLISH_VARIANTS as readonly string[]).includes(variant)) {
    throw new Error(`relaybus has no publish variant "${variant}"; known: ${PUBLISH_VARIANTS.join(', ')}`);
  }
  return variant as PublishVariant;
}

/** The publish variants whose fan-out comes from subscriptions recorded in the database. */
const fromSubscriptions = (variant: PublishVariant) => variant === 'subscriptions' || variant === 'sql';

/**
 * relaybus's warnings and errors go to the run's warning log (printed, kept in the record); with BENCH_DEBUG=1 its debug
 * lines go to the dispatcher's stderr, with the process id and a timestamp (ms), to follow what the loops did. Except the
 * line per delivery ('delivered'): written for each of 50k deliveries it slowed the drain by a third, and the claims'
 * lines then no longer showed how the drain runs.
 */
function loggerOf(hooks: DispatcherHooks | undefined): Api.Logger {
  const noop = () => {};
  const report = (level: string) => (message: string, fields?: Api.LogFields) =>
    hooks?.warn(`${level}: ${message}${fields ? ' ' + JSON.stringify(fields) : ''}`);
  const debug = (message: string, fields?: Api.LogFields) =>
    message === 'delivered' ||
    process.stderr.write(`${process.pid} ${Date.now()} debug: ${message} ${JSON.stringify(fields ?? {})}\n`);
  return { debug: process.env.BENCH_DEBUG ? debug : noop, info: noop, warn: report('warn'), error: report('error') };
}

/**
 * The 'traced' variant's instrumentation: relaybus/opentelemetry over the OpenTelemetry SDK recording every span
 * (BasicTracerProvider, a BatchSpanProcessor at its documented defaults) into an exporter that counts and drops them:
 * the whole recording path runs, nothing is sent. `check` (after the drain) warns when a handler call's span did not
 * reach the exporter (a queue that overflowed would make tracing look cheaper than it is). Loaded only for that variant.
 */
async function tracedInstrumentation(): Promise<{
  instrumentation: Api.Instrumentation;
  check(handlerCalls: number, warn: (message: string) => void): Promise<void>;
}> {
  const { openTelemetry } = (await import(dist('telemetry/opentelemetry.js'))) as typeof TelemetryApi;
  const { BasicTracerProvider, BatchSpanProcessor } = await import('@opentelemetry/sdk-trace-base');
  let exported = 0;
  const countAndDrop = {
    export: (spans: unknown[], done: (result: { code: 0 }) => void) => {
      exported += spans.length;
      done({ code: 0 });
    },
    shutdown: () => Promise.resolve(),
  };
  const provider = new BasicTracerProvider({ spanProcessors: [new BatchSpanProcessor(countAndDrop)] });
  return {
    instrumentation: openTelemetry({ tracer: provider.getTracer('relaybus-bench'), meter: false }),
    async check(handlerCalls, warn) {
      await provider.forceFlush();
      if (exported !== handlerCalls) warn(`traced: ${exported} spans exported for ${handlerCalls} handler calls`);
    },
  };
}

function makeBus(
  pool: pg.Pool,
  schema: string,
  settings?: DispatcherSettings,
  hooks?: DispatcherHooks,
  notify = true,
  instrumentation?: Api.Instrumentation,
  keepEvents = false,
): Api.RelayBus<PgApi.PgClientLike, typeof BenchEvent> {
  const store = postgresStore({
    driver: fromPg(pool),
    schema,
    notify,
    keepEvents,
  });
  return createRelayBus({
    store,
    events: [BenchEvent],
    setupStore: false,
    logger: loggerOf(hooks),
    ...(instrumentation ? { instrumentation } : {}),
    ...(settings
      ? {
          dispatcher: {
            concurrency: settings.concurrency,
            batchSize: settings.batchSize,
            pollIntervalMs: settings.pollIntervalMs,
            ...(settings.extra?.completionBatchWindowMs !== undefined
              ? { completionBatchWindowMs: settings.extra.completionBatchWindowMs }
              : {}),
            ...(settings.extra?.claimLoops !== undefined ? { claimLoops: settings.extra.claimLoops } : {}),
            ...(settings.extra?.followers !== undefined ? { followers: settings.extra.followers } : {}),
          },
        }
      : {}),
  });
}

export const relaybus: Contender = {
  name: isBase ? 'relaybus-base' : 'relaybus',
  ordersKeys: true,
  keyed: true,
  retryBackoff: true,
  keyedVariants: ['defaults', 'tuned', 'no-followers', 'c200', 'pipelined', 'loops1', 'traced'],
  variants: {
    // The library's DEFAULT_* (concurrency 10, batch 10, poll 1 s) on a default-sized pg pool.
    defaults: { concurrency: 10, batchSize: 10, pollIntervalMs: 1000, poolSize: 10 },
    // Its best measured here. Two claim loops (two lease owners sharing the slots): under a backlog one loop's claim waits
    // on Postgres while the other's handlers run; with a shallow queue the second stays dormant, and beside other
    // dispatcher processes it rests (DispatcherOptions.claimLoops; 3 and 4 loops measured slower on 2 cores). 500 a claim: per-claim costs (the statement's fixed part, lane locks, a round trip, the loop's
    // turn) spread over 2.5x more deliveries than at 200/200 (1.24-1.49x deliveries/s, keyed and unkeyed); one loop of
    // 1,000 was slower than 200/200.
    // followers 9: each keyed head brings up to 9 of its key's next due deliveries, read by one scan (DispatcherOptions.
    // followers: each loop starts at 1 and doubles the count after every claim). Beside the
    // same without followers (no-followers), 50k keyed, 3 runs each: 1.20-1.28x; unkeyed and at a light load the same.
    // Every variant (defaults too) runs with the store's holdClaimConnections on (its default since the fourteenth
    // session): each claim loop's statements on a connection it holds, planned once, generically: 1.04x and 1.08x the
    // deliveries/s of 50k at 1 and 4 processes (5 interleaved repetitions each), the mixed cell the same (bench/README.md,
    // Diagnosis, the thirteenth session).
    tuned: {
      concurrency: 1000,
      batchSize: 500,
      pollIntervalMs: 50,
      poolSize: 20,
      extra: { claimLoops: 2, followers: 9 },
    },
    // tuned without followers (what tuned was until retried heads were claimed ahead of their due time: with a fixed 9,
    // claims of 500 heads and their followers took 150-460 ms on a loaded machine and a retried head due meanwhile
    // waited for them).
    'no-followers': {
      concurrency: 1000,
      batchSize: 500,
      pollIntervalMs: 50,
      poolSize: 20,
      extra: { claimLoops: 2 },
    },
    // The setting tuned had before (concurrency 200, batch 200, two loops): beside tuned in the claim-loops cell.
    c200: {
      concurrency: 200,
      batchSize: 200,
      pollIntervalMs: 50,
      poolSize: 20,
      extra: { claimLoops: 2 },
    },
    // Twice the batch in handler slots: the next claim overlaps the completion of the previous batch.
    pipelined: {
      concurrency: 400,
      batchSize: 200,
      pollIntervalMs: 50,
      poolSize: 20,
    },
    // tuned with one claim loop (the library's default count).
    loops1: {
      concurrency: 1000,
      batchSize: 500,
      pollIntervalMs: 50,
      poolSize: 20,
      extra: { followers: 9 },
    },
    // tuned with tracing on: the OpenTelemetry SDK records a consumer span per delivery (no-op exporter).
    traced: {
      concurrency: 1000,
      batchSize: 500,
      pollIntervalMs: 50,
      poolSize: 20,
      extra: { claimLoops: 2, followers: 9, tracing: 1 },
    },
  },
  tables: { deliveries: 'relaybus_deliveries', lanes: 'relaybus_lanes' },

  async setup(url, schema, variant) {
    // Other scenarios pass their dispatcher variants (tuned, ...): only a publish variant that needs subscriptions matters here.
    const recordSubscriptions =
      (PUBLISH_VARIANTS as readonly string[]).includes(variant ?? '') && fromSubscriptions(variant as PublishVariant);
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    try {
      const store = postgresStore({ driver: fromPg(pool), schema });
      await store.setup();
      // What a started worker records (bus.start(): its handlers with the bus's default attempt budget), before the clock.
      if (recordSubscriptions) {
        await store.subscribe(
          HANDLERS.map((handler) => ({ eventType: BenchEvent.type, handler, maxAttempts: DEFAULT_MAX_ATTEMPTS })),
        );
      }
    } finally {
      await pool.end();
    }
  },

  async teardown(admin, schema) {
    await admin.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  },

  async remaining(admin, schema) {
    const {
      rows: [row],
    } = await admin.query<{ pending: string; dead: string }>(
      `SELECT count(*) FILTER (WHERE status = 'pending') AS pending, count(*) FILTER (WHERE status = 'dead') AS dead
       FROM "${schema}".relaybus_deliveries`,
    );
    return { pending: Number(row!.pending), dead: Number(row!.dead), completedRows: 0 };
  },

  async stored(admin, schema) {
    // Each event's payload is { i } (see publisher below), in its events row or, published inline, in its deliveries.
    const { rows } = await admin.query<{ i: string; handler: string }>(
      `SELECT coalesce(d.payload, e.payload)->>'i' AS i, d.handler
       FROM "${schema}".relaybus_deliveries d LEFT JOIN "${schema}".relaybus_events e ON e.id = d.event_id
       WHERE d.status = 'pending'`,
    );
    return pairsOf(rows);
  },

  async publisher({ url, schema, poolSize, variant }) {
    const path = publishVariantOf(variant);
    const pool = new pg.Pool({ connectionString: url, max: poolSize });
    if (path === 'sql') return sqlPublisher(pool, schema);
    const bus = makeBus(pool, schema, undefined, undefined, path !== 'no-notify', undefined, path === 'keep-events');
    // 'subscriptions': no handler here, so the publish statement's fan-out is the subscriptions join.
    if (path !== 'subscriptions') for (const handler of HANDLERS) bus.on(BenchEvent, handler, () => {});
    const withIds = path === 'ids';
    return {
      async publish(events) {
        await inTransaction(pool, async (client) => {
          const options = (e: { i: number; key: string | null }) =>
            withIds ? { key: e.key, id: `e${e.i}` } : { key: e.key };
          if (events.length === 1) {
            await bus.publish(client, BenchEvent, { i: events[0]!.i }, options(events[0]!));
          } else {
            await bus.publishMany(
              client,
              events.map((e) => ({ event: BenchEvent, payload: { i: e.i }, options: options(e) })),
            );
          }
        });
      },
      close: () => pool.end(),
    };
  },

  async dispatcher({ url, schema }, settings, hooks) {
    const pool = new pg.Pool({ connectionString: url, max: settings.poolSize });
    const traced = settings.extra?.tracing ? await tracedInstrumentation() : undefined;
    const bus = makeBus(pool, schema, settings, hooks, true, traced?.instrumentation);
    let handlerCalls = 0;
    const options =
      hooks.retryBackoffMs !== undefined
        ? {
            backoff: {
              initialDelayMs: hooks.retryBackoffMs,
              maxDelayMs: hooks.retryBackoffMs,
              multiplier: 1,
              jitter: 0,
            },
          }
        : {};
    const { retryDue } = hooks;
    if (retryDue === undefined) {
      for (const handler of HANDLERS) {
        const index = handlerIndex(handler);
        bus.on(BenchEvent, handler, options, (payload) => {
          handlerCalls += 1;
          return hooks.onHandle(payload.i, index);
        });
      }
    } else {
      // Liveness: each failed attempt's due time as relaybus set it (the failed event's retryAt), by delivery id.
      const eventOf = new Map<string, number>();
      for (const handler of HANDLERS) {
        const index = handlerIndex(handler);
        bus.on(BenchEvent, handler, options, (payload, ctx) => {
          handlerCalls += 1;
          if (ctx.delivery.attempt === 1) eventOf.set(ctx.delivery.id, payload.i);
          return hooks.onHandle(payload.i, index);
        });
      }
      bus.lifecycle.on('failed', ({ delivery, retryAt }) => {
        const i = eventOf.get(delivery.id);
        if (i !== undefined) retryDue(i, handlerIndex(delivery.handler), retryAt.getTime());
      });
    }
    return {
      // With setupStore: false, relaybus's start() runs one statement (the subscriptions' upsert, timed); its start-up is the pool.
      prepare: () => warmPool(pool, settings.poolSize),
      start: () => bus.start(),
      async stop() {
        await bus.stop({ graceMs: 5_000 });
        await traced?.check(handlerCalls, hooks.warn);
        await pool.end();
      },
    };
  },
};

/**
 * The 'sql' publish variant: `"<schema>".relaybus_publish(type, payload, key, id)` (created by the
 * store's setup) in the caller's transaction, as a trigger or another language's client would call
 * it: one SELECT per event, a batch as one SELECT over unnest of arrays (a function scan yields the
 * arrays in order, so a key's events take their sequence values in publish order). Named prepared
 * statements, as the raw-sql floor's INSERT. Ids are `e<i>`, as the bus publisher's 'ids' variant.
 */
function sqlPublisher(pool: pg.Pool, schema: string): PublisherHandle {
  const fn = `"${schema}".relaybus_publish`;
  const one = { name: `relaybus_sql_one_${schema}`, text: `SELECT ${fn}($1, $2::jsonb, $3, $4)` };
  const many = {
    name: `relaybus_sql_many_${schema}`,
    text: `SELECT ${fn}($1, u.p, u.k, u.i) FROM unnest($2::jsonb[], $3::text[], $4::text[]) AS u(p, k, i)`,
  };
  const type = BenchEvent.type;
  return {
    async publish(events) {
      await inTransaction(pool, async (client) => {
        if (events.length === 1) {
          const event = events[0]!;
          await client.query({ ...one, values: [type, JSON.stringify({ i: event.i }), event.key, `e${event.i}`] });
        } else {
          await client.query({
            ...many,
            values: [
              type,
              events.map((e) => JSON.stringify({ i: e.i })),
              events.map((e) => e.key),
              events.map((e) => `e${e.i}`),
            ],
          });
        }
      });
    },
    close: () => pool.end(),
  };
}
