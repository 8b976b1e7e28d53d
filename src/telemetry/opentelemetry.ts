import {
  context,
  createTraceState,
  isSpanContextValid,
  metrics,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Meter,
  type Span,
  type Tracer,
} from '@opentelemetry/api';
import type { HandlerRunInfo, Instrumentation } from '../core/instrumentation.js';
import type { PublishParams, PublishResult } from '../store/contract.js';
import type { MeterLike } from './meter.js';
import {
  metricsOf,
  observeBus,
  type BusObservation,
  type ObservedBus,
  type ObserveBusOptions,
  type RelayBusMetrics,
} from './metrics.js';
import { formatTraceParent, parseTraceParent, TRACEPARENT, TRACESTATE } from './trace-context.js';

/**
 * `relaybus/opentelemetry`: traces and metrics through `@opentelemetry/api` (an optional peer
 * dependency: only this entry point imports it).
 *
 * - A PRODUCER span `send <event type>` around each `bus.publish` / `publishMany` store write; its
 *   W3C trace context (`traceparent`, `tracestate`) is written into the events' headers, through the
 *   global propagator when one is registered and directly otherwise.
 * - A CONSUMER span `process <event type>` around each handler call, in the trace of the publish
 *   (its parent) and linked to the producer span, so one trace runs from the request that
 *   published to every handler that ran, in any process. The handler runs inside it: spans it
 *   starts are its children.
 * - Attributes follow the OpenTelemetry messaging conventions where they fit (`messaging.system`
 *   `relaybus`, `messaging.destination.name` the event type, `messaging.consumer.group.name` the
 *   handler, `messaging.message.id` the event id) plus `relaybus.handler`, `relaybus.delivery.id`,
 *   `relaybus.key`, `relaybus.attempt`, `relaybus.lane`. A throwing handler's error is recorded.
 * - Metrics: publish count and duration here; `observe(bus)` adds the delivery, claim, lease and
 *   backlog metrics (`telemetry/metrics.ts`).
 *
 * With no SDK registered every span is a non-recording no-op: nothing is written into headers
 * (unless a valid parent context is active) and no attribute object is built.
 *
 * ```ts
 * import { openTelemetry } from 'relaybus/opentelemetry';
 * const telemetry = openTelemetry();
 * const bus = createRelayBus({ store, events: [OrderPlaced], instrumentation: telemetry });
 * telemetry.observe(bus); // delivery, claim and backlog metrics through the global MeterProvider
 * ```
 */

export interface OpenTelemetryOptions {
  /** Default: `trace.getTracer('relaybus')` (the global provider, looked up lazily). */
  readonly tracer?: Tracer;
  /** Where metrics go. Default: `metrics.getMeter('relaybus')`; `false`: no publish metrics. */
  readonly meter?: Meter | MeterLike | false;
}

/** The instrumentation to pass to `createRelayBus`, and `observe` for the bus-level metrics. */
export interface RelayBusTelemetry extends Required<Instrumentation> {
  /** Record the delivery, claim, lease and backlog metrics of `bus` (see `observeBus`) through this telemetry's meter. */
  observe<TTx>(
    bus: ObservedBus<TTx>,
    options?: ObserveBusOptions & { readonly meter?: Meter | MeterLike },
  ): BusObservation;
}

const SYSTEM = 'relaybus';
const CONSUMER = Object.freeze({ kind: SpanKind.CONSUMER });

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    value !== null &&
    (typeof value === 'object' || typeof value === 'function') &&
    typeof (value as PromiseLike<unknown>).then === 'function'
  );
}

function errorType(error: unknown): string {
  if (typeof error === 'object' && error !== null) {
    const code = (error as { code?: unknown }).code;
    if (typeof code === 'string') return code;
    if (error instanceof Error) return error.name;
  }
  return '_OTHER';
}

function fail(span: Span, error: unknown): void {
  if (!span.isRecording()) return;
  if (error instanceof Error) span.recordException(error);
  else span.recordException({ name: 'Error', message: String(error) });
  span.setAttribute('error.type', errorType(error));
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
}

/** The context an event's headers carry: the global propagator's reading, else the W3C headers read directly. */
export function contextFromHeaders(headers: Readonly<Record<string, string>>): Context {
  const extracted = propagation.extract(ROOT_CONTEXT, headers);
  if (trace.getSpanContext(extracted) !== undefined) return extracted;
  const parent = parseTraceParent(headers);
  if (parent === undefined) return extracted;
  return trace.setSpanContext(extracted, {
    traceId: parent.traceId,
    spanId: parent.spanId,
    traceFlags: parent.traceFlags,
    isRemote: true,
    ...(parent.traceState === undefined ? {} : { traceState: createTraceState(parent.traceState) }),
  });
}

/** The headers that carry `ctx`: the global propagator's, plus W3C `traceparent` when it wrote none. */
export function headersFromContext(ctx: Context): Record<string, string> {
  const carrier: Record<string, string> = {};
  propagation.inject(ctx, carrier);
  const spanContext = trace.getSpanContext(ctx);
  if (carrier[TRACEPARENT] === undefined && spanContext !== undefined && isSpanContextValid(spanContext)) {
    carrier[TRACEPARENT] = formatTraceParent(spanContext);
    const state = spanContext.traceState?.serialize();
    if (state) carrier[TRACESTATE] = state;
  }
  return carrier;
}

/** The event type all `events` share, or undefined for a mix. */
function commonType(events: readonly PublishParams[]): string | undefined {
  const type = events[0]?.type;
  for (let i = 1; i < events.length; i += 1) if (events[i]!.type !== type) return undefined;
  return type;
}

function recordPublish(
  metrics: RelayBusMetrics | undefined,
  events: readonly PublishParams[],
  seconds: number,
  ok: boolean,
): void {
  if (metrics === undefined) return;
  metrics.publishDuration.record(seconds, { result: ok ? 'ok' : 'error' });
  if (!ok) return;
  const counts = new Map<string, number>();
  for (const event of events) counts.set(event.type, (counts.get(event.type) ?? 0) + 1);
  for (const [type, count] of counts) metrics.publishedEvents.add(count, { event_type: type });
}

/** Traces and metrics through `@opentelemetry/api`; see the module header. */
export function openTelemetry(options: OpenTelemetryOptions = {}): RelayBusTelemetry {
  const tracer = options.tracer ?? trace.getTracer('relaybus');
  const meter: MeterLike | undefined =
    options.meter === false ? undefined : ((options.meter as MeterLike | undefined) ?? metrics.getMeter('relaybus'));
  const publishMetrics = meter === undefined ? undefined : metricsOf(meter);

  return {
    publish(
      events: readonly PublishParams[],
      write: (events: readonly PublishParams[]) => Promise<PublishResult[]>,
    ): Promise<PublishResult[]> {
      const type = commonType(events);
      const span = tracer.startSpan(type === undefined ? 'send' : `send ${type}`, { kind: SpanKind.PRODUCER });
      const ctx = trace.setSpan(context.active(), span);
      let toWrite = events;
      if (span.isRecording()) {
        span.setAttributes({
          'messaging.system': SYSTEM,
          'messaging.operation.type': 'send',
          'messaging.operation.name': 'publish',
          ...(type === undefined ? {} : { 'messaging.destination.name': type, 'relaybus.event.type': type }),
          ...(events.length > 1 ? { 'messaging.batch.message_count': events.length } : {}),
          ...(events.length === 1 && typeof events[0]!.key === 'string' ? { 'relaybus.key': events[0]!.key } : {}),
        });
      }
      if (isSpanContextValid(span.spanContext())) {
        const carrier = headersFromContext(ctx);
        toWrite = events.map((event) => ({ ...event, headers: { ...event.headers, ...carrier } }));
      }
      const started = performance.now();
      let written: Promise<PublishResult[]>;
      try {
        written = context.with(ctx, () => write(toWrite));
      } catch (error) {
        written = Promise.reject(error);
      }
      return written.then(
        (results) => {
          recordPublish(publishMetrics, events, (performance.now() - started) / 1000, true);
          if (span.isRecording() && results.length === 1) {
            span.setAttribute('messaging.message.id', results[0]!.eventId);
            if (results[0]!.duplicate) span.setAttribute('relaybus.duplicate', true);
          }
          span.end();
          return results;
        },
        (error: unknown) => {
          recordPublish(publishMetrics, events, (performance.now() - started) / 1000, false);
          fail(span, error);
          span.end();
          throw error;
        },
      );
    },

    runHandler({ delivery, lane }: HandlerRunInfo, call: () => unknown): unknown {
      const parent = contextFromHeaders(delivery.headers);
      const producer = trace.getSpanContext(parent);
      const span = tracer.startSpan(
        `process ${delivery.eventType}`,
        producer === undefined ? CONSUMER : { kind: SpanKind.CONSUMER, links: [{ context: producer }] },
        parent,
      );
      if (span.isRecording()) {
        // One object, set once: the SDK validates each attribute, so the set is kept to what a query needs.
        const attributes: Attributes = {
          'messaging.system': SYSTEM,
          'messaging.operation.type': 'process',
          'messaging.destination.name': delivery.eventType,
          'messaging.message.id': delivery.eventId,
          'messaging.consumer.group.name': delivery.handler,
          'relaybus.event.type': delivery.eventType,
          'relaybus.handler': delivery.handler,
          'relaybus.delivery.id': delivery.id,
          'relaybus.attempt': delivery.attempt,
          'relaybus.lane': lane,
        };
        if (delivery.key !== null) attributes['relaybus.key'] = delivery.key;
        span.setAttributes(attributes);
      }
      let result: unknown;
      try {
        result = context.with(trace.setSpan(parent, span), call);
      } catch (error) {
        fail(span, error);
        span.end();
        throw error;
      }
      if (!isThenable(result)) {
        span.end();
        return result;
      }
      // A native promise is chained as it is; another thenable is adopted first (its `then` may throw).
      return (result instanceof Promise ? result : new Promise<unknown>((resolve) => resolve(result))).then(
        (value) => {
          span.end();
          return value;
        },
        (error: unknown) => {
          fail(span, error);
          span.end();
          throw error;
        },
      );
    },

    observe(bus, observeOptions = {}) {
      const { meter: own, ...rest } = observeOptions;
      return observeBus(bus, (own as MeterLike | undefined) ?? meter ?? metrics.getMeter('relaybus'), rest);
    },
  };
}

export { observeBus } from './metrics.js';
export type { BusObservation, ObservedBus, ObserveBusOptions } from './metrics.js';
export type { MeterLike } from './meter.js';
