/**
 * The cost of tracing on the dispatch and publish cells, in one process against Postgres, three
 * variants interleaved round by round (the machine is shared and noisy: compare ratios):
 *
 * - `off`: no `instrumentation` (the default);
 * - `api, no SDK`: `openTelemetry()` with no SDK registered (spans are non-recording no-ops);
 * - `SDK, no-op exporter`: `openTelemetry()` over a `BasicTracerProvider` with a `BatchSpanProcessor`
 *   whose exporter drops everything: every span is recorded, attributed and batched.
 *
 * Dispatch: N deliveries preloaded (N/2 unkeyed events x 2 handlers; for the traced variants
 * published through the traced bus, so the events carry `traceparent`), then one in-process
 * dispatcher drains them with a no-op handler; rate = deliveries / (last delivered - start).
 * Publish: P events, one transaction each, through `bus.publish`.
 * Exactness: every delivery is delivered once, nothing is left pending.
 *
 *   node --import tsx bench/tracing-cost.ts [--deliveries 10000] [--publishes 1000] [--rounds 5]
 */
import { parseArgs } from 'node:util';
import { trace, type Tracer } from '@opentelemetry/api';
import {
  BasicTracerProvider,
  BatchSpanProcessor,
  type ReadableSpan,
  TraceIdRatioBasedSampler,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base';
import pg from 'pg';
import { createRelayBus, defineEvent, Type, type Instrumentation } from '../src/index.js';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../src/postgres/index.js';
import { openTelemetry } from '../src/telemetry/opentelemetry.js';

const { values } = parseArgs({
  options: {
    deliveries: { type: 'string', default: '10000' },
    publishes: { type: 'string', default: '1000' },
    rounds: { type: 'string', default: '5' },
  },
});
const DELIVERIES = Number(values.deliveries);
const PUBLISHES = Number(values.publishes);
const ROUNDS = Number(values.rounds);
const URL_ = process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const SCHEMA = 'bench_tracing_cost';
const HANDLERS = ['a', 'b'];
const Work = defineEvent('work', Type.Object({ n: Type.Integer() }));

/** Drops every span: the SDK's whole recording path runs, nothing is sent anywhere. */
class NoopExporter implements SpanExporter {
  export(_spans: ReadableSpan[], done: (result: { code: 0 }) => void): void {
    done({ code: 0 });
  }
  shutdown(): Promise<void> {
    return Promise.resolve();
  }
}

const sdk = new BasicTracerProvider({
  spanProcessors: [new BatchSpanProcessor(new NoopExporter())],
});
/** The same SDK keeping 1 trace in 100 (by trace id): a deployment that samples pays for the kept spans only. */
const sampled = new BasicTracerProvider({
  sampler: new TraceIdRatioBasedSampler(0.01),
  spanProcessors: [new BatchSpanProcessor(new NoopExporter())],
});
/**
 * `publisher`: the instrumentation of the publishing bus when it differs (the sampled variant publishes untraced, so
 * each delivery starts a trace of its own and the ratio applies per delivery, not per published batch).
 */
const variants: readonly {
  readonly name: string;
  readonly instrumentation: () => Instrumentation | undefined;
  readonly publisher?: () => Instrumentation | undefined;
}[] = [
  { name: 'off', instrumentation: () => undefined },
  { name: 'api, no SDK', instrumentation: () => openTelemetry({ tracer: trace.getTracer('relaybus') }) },
  {
    name: 'SDK, no-op exporter',
    instrumentation: () => openTelemetry({ tracer: sdk.getTracer('relaybus') as Tracer }),
  },
  {
    name: 'SDK, 1% of traces sampled',
    instrumentation: () => openTelemetry({ tracer: sampled.getTracer('relaybus') as Tracer }),
    publisher: () => undefined,
  },
];

const pool = new pg.Pool({ connectionString: URL_, max: 12 });
pool.on('error', () => {});
const store: PostgresStore<PgClientLike> = postgresStore({ driver: fromPg(pool), schema: SCHEMA });

function busWith(instrumentation: Instrumentation | undefined, onDelivered?: (id: string) => void) {
  const bus = createRelayBus({
    store,
    events: [Work],
    setupStore: false,
    dispatcher: { concurrency: 32, batchSize: 64, pollIntervalMs: 20 },
    ...(instrumentation === undefined ? {} : { instrumentation }),
  });
  for (const name of HANDLERS) bus.on(Work, name, () => {});
  if (onDelivered) bus.lifecycle.on('delivered', ({ delivery }) => onDelivered(delivery.id));
  return bus;
}

async function reset(): Promise<void> {
  await pool.query(`TRUNCATE "${SCHEMA}".relaybus_deliveries, "${SCHEMA}".relaybus_events`);
  await pool
    .query(`UPDATE "${SCHEMA}".relaybus_lanes SET lease_owner = NULL, lease_expires_at = NULL, in_flight = '{}'`)
    .catch(() => {});
}

async function dispatchRound(
  instrumentation: Instrumentation | undefined,
  publishing: Instrumentation | undefined = instrumentation,
): Promise<{ rate: number; cpuUs: number }> {
  await reset();
  const publisher = busWith(publishing);
  const events = DELIVERIES / HANDLERS.length;
  for (let first = 0; first < events; first += 500) {
    await store.transaction((tx) =>
      publisher.publishMany(
        tx,
        Array.from({ length: Math.min(500, events - first) }, (_, i) => ({ event: Work, payload: { n: first + i } })),
      ),
    );
  }
  await pool.query(`ANALYZE "${SCHEMA}".relaybus_deliveries`);
  const seen = new Set<string>();
  let duplicates = 0;
  let last = 0;
  let resolveDone!: () => void;
  const done = new Promise<void>((resolve) => (resolveDone = resolve));
  const bus = busWith(instrumentation, (id) => {
    if (seen.has(id)) duplicates += 1;
    seen.add(id);
    last = performance.now();
    if (seen.size === DELIVERIES) resolveDone();
  });
  const cpu = process.cpuUsage();
  const start = performance.now();
  await bus.start();
  await done;
  const used = process.cpuUsage(cpu);
  await bus.stop();
  const stats = await store.statistics();
  if (duplicates !== 0 || stats.pending !== 0 || stats.inFlight !== 0 || stats.dead !== 0) {
    throw new Error(
      `exactness: duplicates ${duplicates}, pending ${stats.pending}, in flight ${stats.inFlight}, dead ${stats.dead}`,
    );
  }
  return { rate: DELIVERIES / ((last - start) / 1000), cpuUs: (used.user + used.system) / DELIVERIES };
}

async function publishRound(instrumentation: Instrumentation | undefined): Promise<{ rate: number; cpuUs: number }> {
  await reset();
  const bus = busWith(instrumentation);
  const cpu = process.cpuUsage();
  const start = performance.now();
  for (let n = 0; n < PUBLISHES; n += 1) await store.transaction((tx) => bus.publish(tx, Work, { n }));
  const seconds = (performance.now() - start) / 1000;
  const used = process.cpuUsage(cpu);
  // Small events without an id carry their payload in their deliveries (no events row): count the deliveries.
  const { rows } = await pool.query<{ count: number }>(
    `SELECT count(*)::int AS count FROM "${SCHEMA}".relaybus_deliveries`,
  );
  if (rows[0]!.count !== PUBLISHES * HANDLERS.length)
    throw new Error(`exactness: ${rows[0]!.count} deliveries written, ${PUBLISHES * HANDLERS.length} expected`);
  return { rate: PUBLISHES / seconds, cpuUs: (used.user + used.system) / PUBLISHES };
}

function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid]! : (sorted[mid - 1]! + sorted[mid]!) / 2;
}

await pool.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
await store.setup();
const results = new Map<
  string,
  { dispatch: { rate: number; cpuUs: number }[]; publish: { rate: number; cpuUs: number }[] }
>();
for (const variant of variants) results.set(variant.name, { dispatch: [], publish: [] });
try {
  // One warm-up round of each, not counted (JIT, plan caches, the pool).
  for (const variant of variants) {
    await dispatchRound(variant.instrumentation(), (variant.publisher ?? variant.instrumentation)());
    await publishRound(variant.instrumentation());
  }
  for (let round = 0; round < ROUNDS; round += 1) {
    const order = round % 2 === 0 ? variants : [...variants].reverse();
    for (const variant of order) {
      const entry = results.get(variant.name)!;
      entry.dispatch.push(
        await dispatchRound(variant.instrumentation(), (variant.publisher ?? variant.instrumentation)()),
      );
      entry.publish.push(await publishRound(variant.instrumentation()));
    }
    process.stderr.write(`round ${round + 1}/${ROUNDS} done\n`);
  }
} finally {
  await pool.query(`DROP SCHEMA IF EXISTS "${SCHEMA}" CASCADE`);
  await sdk.shutdown();
  await pool.end();
}

const off = results.get('off')!;
const base = { dispatch: median(off.dispatch.map((r) => r.rate)), publish: median(off.publish.map((r) => r.rate)) };
console.log(
  `tracing cost: dispatch N=${DELIVERIES} (D=1, concurrency 32, batch 64, no-op handler), publish ${PUBLISHES} x 1 event/transaction; medians of ${ROUNDS} interleaved rounds`,
);
console.log('');
console.log(
  '| variant | dispatch deliveries/s | vs off | CPU us/delivery | publish events/s | vs off | CPU us/publish |',
);
console.log('| --- | ---: | ---: | ---: | ---: | ---: | ---: |');
for (const [name, entry] of results) {
  const dispatch = median(entry.dispatch.map((r) => r.rate));
  const publish = median(entry.publish.map((r) => r.rate));
  console.log(
    `| ${name} | ${dispatch.toFixed(0)} | ${((dispatch / base.dispatch) * 100).toFixed(1)}% | ${median(entry.dispatch.map((r) => r.cpuUs)).toFixed(1)} | ${publish.toFixed(0)} | ${((publish / base.publish) * 100).toFixed(1)}% | ${median(entry.publish.map((r) => r.cpuUs)).toFixed(1)} |`,
  );
}
