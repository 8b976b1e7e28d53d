/**
 * Tracing and metrics through `relaybus/opentelemetry`, with the OpenTelemetry SDK's in-memory
 * exporters on real Postgres:
 * - a publish inside a request span (this process) and the deliveries in a worker process (a child
 *   process with its own SDK) make one trace: the consumer spans are children of the producer span
 *   and linked to it, carry the messaging and relaybus attributes, and a throwing handler's error is
 *   recorded;
 * - without an SDK nothing is written into the headers;
 * - the metric counters equal what actually happened in a run with retries and dead letters.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { after, before, describe, it } from 'node:test';
import { context, SpanKind, trace } from '@opentelemetry/api';
import {
  AggregationTemporality,
  DataPointType,
  MeterProvider,
  MetricReader,
  type HistogramMetricData,
  type MetricData,
} from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import pg from 'pg';
import { createRelayBus, defineEvent, Type } from '../../src/index.js';
import { fromPg, postgresStore, type PgClientLike, type PostgresStore } from '../../src/postgres/index.js';
import type { MeterLike } from '../../src/telemetry/meter.js';
import { openTelemetry } from '../../src/telemetry/opentelemetry.js';
import { findPostgres, uniqueSchemaName } from '../support/databases.js';
import { waitFor } from '../support/wait.js';
import { AlsContextManager } from './als-context.js';
import { OrderPlaced, tracedBus } from './fixtures/traced-bus.js';

const found = await findPostgres();
const WORKER = fileURLToPath(new URL('./fixtures/traced-worker.ts', import.meta.url));

interface ExportedSpan {
  readonly name: string;
  readonly kind: number;
  readonly traceId: string;
  readonly spanId: string;
  readonly parentSpanId?: string;
  readonly links: readonly { traceId: string; spanId: string }[];
  readonly attributes: Record<string, unknown>;
  readonly status: { code: number; message?: string };
  readonly exceptions: readonly Record<string, unknown>[];
}

class TestReader extends MetricReader {
  constructor() {
    super({ aggregationTemporalitySelector: () => AggregationTemporality.CUMULATIVE });
  }
  protected override onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
  protected override onShutdown(): Promise<void> {
    return Promise.resolve();
  }
}

describe('relaybus/opentelemetry (real Postgres, OpenTelemetry SDK in memory)', {
  skip: 'skip' in found ? found.skip : undefined,
}, () => {
  const url = 'url' in found ? found.url : '';
  const schema = uniqueSchemaName('otel');
  let pool: pg.Pool;
  let store: PostgresStore<PgClientLike>;
  const manager = new AlsContextManager();

  before(async () => {
    context.setGlobalContextManager(manager);
    pool = new pg.Pool({ connectionString: url, max: 4 });
    store = postgresStore({ driver: fromPg(pool), schema, completionHistory: true });
    await store.setup();
  });
  after(async () => {
    context.disable();
    await pool?.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
    await pool?.end();
  });

  it('a publish in a request span and its deliveries in a worker process make one trace', {
    timeout: 30_000,
  }, async () => {
    const exporter = new InMemorySpanExporter();
    const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
    const tracer = provider.getTracer('app');
    const bus = tracedBus(store, openTelemetry({ tracer: provider.getTracer('relaybus'), meter: false }));

    const request = await tracer.startActiveSpan('POST /orders', { kind: SpanKind.SERVER }, async (span) => {
      await store.transaction((tx) =>
        bus.publish(tx, OrderPlaced, { orderId: 'o-1' }, { key: 'customer-7', headers: { tenant: 'acme' } }),
      );
      span.end();
      return span.spanContext();
    });
    const [producer] = exporter.getFinishedSpans().filter((span) => span.kind === SpanKind.PRODUCER);
    assert.ok(producer, 'a producer span');
    assert.equal(producer.name, 'send order.placed');
    assert.equal(
      producer.parentSpanContext?.spanId,
      request.spanId,
      'the producer span is a child of the request span',
    );
    assert.equal(producer.attributes['messaging.system'], 'relaybus');
    assert.equal(producer.attributes['messaging.destination.name'], 'order.placed');
    assert.equal(producer.attributes['relaybus.key'], 'customer-7');
    const eventId = producer.attributes['messaging.message.id'];
    assert.equal(typeof eventId, 'string');

    const { rows } = await pool.query<{ headers: Record<string, string> }>(
      `SELECT headers FROM "${schema}".relaybus_events WHERE id = $1`,
      [eventId],
    );
    assert.equal(rows[0]!.headers.tenant, 'acme', "the caller's headers are kept");
    assert.equal(
      rows[0]!.headers.traceparent,
      `00-${request.traceId}-${producer.spanContext().spanId}-01`,
      'the W3C trace context is in the event headers',
    );

    const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', WORKER], {
      env: { ...process.env, DATABASE_URL: url, TEST_SCHEMA: schema, EXPECTED_OUTCOMES: '2' },
      timeout: 25_000,
    });
    const spans = JSON.parse(stdout.trim().split('\n').at(-1)!) as ExportedSpan[];
    const consumers = spans.filter((span) => span.kind === SpanKind.CONSUMER);
    assert.deepEqual(consumers.map((span) => span.attributes['relaybus.handler']).sort(), ['doomed', 'send-receipt']);
    for (const consumer of consumers) {
      assert.equal(consumer.name, 'process order.placed');
      assert.equal(consumer.traceId, request.traceId, 'one trace from the request to every handler');
      assert.equal(
        consumer.parentSpanId,
        producer.spanContext().spanId,
        'the consumer span is a child of the producer span',
      );
      assert.deepEqual(
        consumer.links,
        [{ traceId: request.traceId, spanId: producer.spanContext().spanId }],
        'and linked to it',
      );
      assert.equal(consumer.attributes['messaging.system'], 'relaybus');
      assert.equal(consumer.attributes['messaging.operation.type'], 'process');
      assert.equal(consumer.attributes['messaging.destination.name'], 'order.placed');
      assert.equal(consumer.attributes['relaybus.event.type'], 'order.placed');
      assert.equal(consumer.attributes['messaging.message.id'], eventId);
      assert.equal(consumer.attributes['relaybus.key'], 'customer-7');
      assert.equal(consumer.attributes['relaybus.attempt'], 1);
      assert.equal(typeof consumer.attributes['relaybus.delivery.id'], 'string');
      assert.ok(Number.isInteger(consumer.attributes['relaybus.lane']));
    }
    const receipt = consumers.find((span) => span.attributes['relaybus.handler'] === 'send-receipt')!;
    const email = spans.find((span) => span.name === 'send email');
    assert.equal(email?.parentSpanId, receipt.spanId, 'a span the handler starts is a child of its consumer span');
    assert.equal(email?.traceId, request.traceId);
    const doomed = consumers.find((span) => span.attributes['relaybus.handler'] === 'doomed')!;
    assert.equal(doomed.status.code, 2, "the failed handler's span has status ERROR");
    assert.equal(doomed.status.message, 'doomed by design');
    assert.equal(doomed.exceptions[0]?.['exception.message'], 'doomed by design', 'and the exception recorded');
    assert.equal(receipt.status.code, 0);
  });

  it('without an SDK, publishing writes no trace headers', async () => {
    const bus = tracedBus(store, openTelemetry());
    const [result] = await store.transaction(async (tx) => [await bus.publish(tx, OrderPlaced, { orderId: 'o-2' })]);
    const { rows } = await pool.query<{ headers: Record<string, string> }>(
      `SELECT headers FROM "${schema}".relaybus_events WHERE id = $1`,
      [result!.eventId],
    );
    assert.deepEqual(rows[0]!.headers, {});
    await pool.query(`DELETE FROM "${schema}".relaybus_deliveries WHERE event_id = $1`, [result!.eventId]);
  });

  it('metric counters equal the deliveries completed, failed and dead in a run with failures', {
    timeout: 30_000,
  }, async () => {
    await pool.query(`DELETE FROM "${schema}".relaybus_deliveries`); // the dead letter of the first test
    const reader = new TestReader();
    const provider = new MeterProvider({ readers: [reader] });
    const meter = provider.getMeter('relaybus');
    const asMeterLike: MeterLike = meter; // an OpenTelemetry Meter is a MeterLike without a cast
    const telemetry = openTelemetry({ tracer: trace.getTracer('none'), meter: asMeterLike });
    const Work = defineEvent('work', Type.Object({ n: Type.Integer() }));
    const bus = createRelayBus({
      store,
      events: [Work],
      instrumentation: telemetry,
      maxAttempts: 2,
      backoff: { initialDelayMs: 1, maxDelayMs: 5, jitter: 0 },
      dispatcher: { pollIntervalMs: 10, concurrency: 8, batchSize: 8 },
    });
    const runs: { handler: string; ok: boolean }[] = [];
    bus.on(Work, 'ok', () => void runs.push({ handler: 'ok', ok: true }));
    bus.on(Work, 'flaky', (payload, ctx) => {
      const ok = ctx.delivery.attempt > 1 || payload.n % 2 === 0;
      runs.push({ handler: 'flaky', ok });
      if (!ok) throw new Error('first attempt of an odd one');
    });
    bus.on(Work, 'doomed', () => {
      runs.push({ handler: 'doomed', ok: false });
      throw new Error('never works');
    });
    const observation = telemetry.observe(bus, { statisticsIntervalMs: 0 });
    const events = 20;
    await store.transaction((tx) =>
      bus.publishMany(
        tx,
        Array.from({ length: events }, (_, n) => ({ event: Work, payload: { n } })),
      ),
    );
    await bus.start();
    try {
      await waitFor(
        async () => {
          const stats = await store.statistics();
          return stats.pending === 0 && stats.inFlight === 0;
        },
        'every delivery completed or died',
        20_000,
      );
    } finally {
      await bus.stop();
    }
    await observation.sample();
    const stats = await store.statistics();
    const { resourceMetrics } = await reader.collect();
    const all: MetricData[] = resourceMetrics.scopeMetrics.flatMap((scope) => scope.metrics);
    const metric = (name: string) => all.find((item) => item.descriptor.name === name);
    const sum = (name: string, attributes: Record<string, string>): number =>
      (metric(name)?.dataPoints ?? [])
        .filter((point) => Object.entries(attributes).every(([key, value]) => point.attributes[key] === value))
        .reduce((total, point) => total + (typeof point.value === 'number' ? point.value : 0), 0);

    const actual = (handler: string, ok: boolean) =>
      runs.filter((run) => run.handler === handler && run.ok === ok).length;
    for (const handler of ['ok', 'flaky', 'doomed']) {
      const dead = stats.handlers[handler]?.dead ?? 0;
      assert.equal(
        sum('relaybus.deliveries', { handler, outcome: 'completed' }),
        actual(handler, true),
        `${handler}: completed`,
      );
      assert.equal(
        sum('relaybus.deliveries', { handler, outcome: 'dead' }),
        dead,
        `${handler}: dead equals the dead rows`,
      );
      assert.equal(
        sum('relaybus.deliveries', { handler, outcome: 'failed' }),
        actual(handler, false) - dead,
        `${handler}: failed = throws that were retried`,
      );
    }
    assert.equal(actual('ok', true), events);
    assert.equal(actual('flaky', false), events / 2);
    assert.equal(stats.handlers.doomed?.dead, events);
    const completedHistory = await pool.query<{ count: number }>(
      `SELECT count(*)::int AS count FROM "${schema}".relaybus_completed_deliveries WHERE handler IN ('ok', 'flaky')`,
    );
    assert.equal(completedHistory.rows[0]!.count, 2 * events, 'the completion history agrees');

    const durations = metric('relaybus.handler.duration') as HistogramMetricData | undefined;
    assert.equal(durations?.dataPointType, DataPointType.HISTOGRAM);
    assert.equal(
      durations!.dataPoints.reduce((total, point) => total + point.value.count, 0),
      runs.length,
      'one duration per handler run',
    );
    assert.equal(sum('relaybus.publish.events', { event_type: 'work' }), events);
    assert.equal(sum('relaybus.backlog.dead', { handler: 'doomed' }), events, 'the sampled backlog');
    assert.equal(sum('relaybus.backlog.pending', { handler: 'ok' }), 0);
    assert.ok((metric('relaybus.claim.size')?.dataPoints.length ?? 0) > 0, 'claims were measured');
    observation.stop();
    await pool.query(`DELETE FROM "${schema}".relaybus_deliveries`);
  });
});
