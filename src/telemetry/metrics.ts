import type { RelayBus } from '../bus/bus-api.js';
import { describeError, noopLogger, type Logger } from '../core/logger.js';
import type {
  ClaimParams,
  ClaimSession,
  ClaimSessionOptions,
  DeliveryLease,
  ExtendLeaseParams,
  ExtendLeaseResult,
  HandlerStatistics,
  ReplayView,
  Statistics,
  Store,
} from '../store/contract.js';
import type { CounterLike, HistogramLike, MeterLike, ObservableCallbackLike, ObservableGaugeLike } from './meter.js';

/**
 * The metrics of a bus, recorded through any `MeterLike` (an OpenTelemetry `Meter`, or the worker's
 * Prometheus registry). Names follow OpenTelemetry (dots, units in `unit`); the Prometheus registry
 * turns `relaybus.handler.duration` in seconds into `relaybus_handler_duration_seconds`.
 *
 * Sources, so that the core needs no metrics hook: the lifecycle events (`delivered`, `failed`,
 * `dead`, `lease-lost`) give the outcome counters and the handler durations; `store.statistics()`,
 * sampled every `statisticsIntervalMs`, gives the backlog (and `store.listReplays()` the running replays' progress); the store's `claim` and `extendLease`
 * are wrapped on the store object itself (claim size and duration through the claim sessions it opens, lease renewals); the publish
 * counters come from the `instrumentation.publish` hook (`openTelemetry()`).
 */

/** Seconds: 1 ms to 1 min. */
export const DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];
/** Deliveries per claim. */
export const CLAIM_SIZE_BUCKETS = [0, 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000];
/** Default interval of the backlog sampling. */
export const DEFAULT_STATISTICS_INTERVAL_MS = 5_000;

/** The instruments, created once per meter. */
export class RelayBusMetrics {
  readonly deliveries: CounterLike;
  readonly handlerDuration: HistogramLike;
  readonly leasesLost: CounterLike;
  readonly leaseRenewals: CounterLike;
  readonly claimSize: HistogramLike;
  readonly claimDuration: HistogramLike;
  readonly publishedEvents: CounterLike;
  readonly publishDuration: HistogramLike;
  readonly #meter: MeterLike;

  constructor(meter: MeterLike) {
    this.#meter = meter;
    this.deliveries = meter.createCounter('relaybus.deliveries', {
      unit: '{delivery}',
      description: 'Handler runs by outcome: completed, failed (rescheduled) or dead (out of attempts).',
    });
    this.handlerDuration = meter.createHistogram('relaybus.handler.duration', {
      unit: 's',
      description: "Time from a handler's start to its outcome being written.",
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
    this.leasesLost = meter.createCounter('relaybus.leases.lost', {
      unit: '{delivery}',
      description:
        'Deliveries whose lane lease was lost while they ran (their result was dropped; they run again elsewhere).',
    });
    this.leaseRenewals = meter.createCounter('relaybus.lease.renewals', {
      unit: '{lane}',
      description: 'Lane lease renewals by result: extended or lost.',
    });
    this.claimSize = meter.createHistogram('relaybus.claim.size', {
      unit: '{delivery}',
      description: 'Deliveries returned by one claim.',
      advice: { explicitBucketBoundaries: CLAIM_SIZE_BUCKETS },
    });
    this.claimDuration = meter.createHistogram('relaybus.claim.duration', {
      unit: 's',
      description: 'Duration of one claim call.',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
    this.publishedEvents = meter.createCounter('relaybus.publish.events', {
      unit: '{event}',
      description: 'Events written by bus.publish and bus.publishMany (in transactions that may still roll back).',
    });
    this.publishDuration = meter.createHistogram('relaybus.publish.duration', {
      unit: 's',
      description: 'Duration of one publish store call.',
      advice: { explicitBucketBoundaries: DURATION_BUCKETS },
    });
  }

  /** An observable gauge of this meter. */
  gauge(name: string, unit: string, description: string): ObservableGaugeLike {
    return this.#meter.createObservableGauge(name, { unit, description });
  }
}

/** The instruments of `meter`, shared by every bus observed through it (a meter refuses a name twice with another shape). */
const byMeter = new WeakMap<MeterLike, RelayBusMetrics>();

/** The `RelayBusMetrics` of `meter`, created on first use. */
export function metricsOf(meter: MeterLike): RelayBusMetrics {
  let metrics = byMeter.get(meter);
  if (metrics === undefined) byMeter.set(meter, (metrics = new RelayBusMetrics(meter)));
  return metrics;
}

/** What `observeBus` reads of a bus. */
export type ObservedBus<TTx> = Pick<RelayBus<TTx>, 'lifecycle' | 'store'> & { readonly handlers?: readonly string[] };

export interface ObserveBusOptions {
  /** How often the backlog is sampled from `store.statistics()`; 0 turns the sampling off. Default 5 s. */
  readonly statisticsIntervalMs?: number;
  /** Where a failed sample is logged (at warn, once per failing streak). */
  readonly logger?: Logger;
}

/** A running observation of a bus; `stop()` detaches it. */
export interface BusObservation {
  /** The last backlog sample, and when it was taken (with the running replays, when the store could list them). */
  readonly lastSample:
    | { readonly at: Date; readonly statistics: Statistics; readonly replays?: readonly ReplayView[] }
    | undefined;
  /** Why the last sample failed, while it does. */
  readonly lastSampleError: string | undefined;
  /** Take a backlog sample now (also what the interval does). */
  sample(): Promise<void>;
  stop(): void;
}

const BACKLOG: readonly (readonly [keyof HandlerStatistics, string, string])[] = [
  ['pending', 'relaybus.backlog.pending', 'Pending deliveries not in flight (due or scheduled), per handler.'],
  ['due', 'relaybus.backlog.due', 'Deliveries claimable now, per handler.'],
  ['scheduled', 'relaybus.backlog.scheduled', 'Deliveries available later (delayed or backing off), per handler.'],
  ['inFlight', 'relaybus.backlog.in_flight', 'Deliveries claimed by a worker and not finished, per handler.'],
  ['dead', 'relaybus.backlog.dead', 'Dead deliveries waiting for a requeue, per handler.'],
];

/**
 * Record the metrics of `bus` through `meter` until `stop()`: outcome counters and durations from
 * its lifecycle events, claim and renewal figures from its store, the backlog sampled at an interval.
 *
 * ```ts
 * const observation = observeBus(bus, metrics.getMeter('relaybus'));
 * // ... on shutdown
 * observation.stop();
 * ```
 */
export function observeBus<TTx>(
  bus: ObservedBus<TTx>,
  meter: MeterLike,
  options: ObserveBusOptions = {},
): BusObservation {
  const metrics = metricsOf(meter);
  const logger = options.logger ?? noopLogger;
  const disposers: (() => void)[] = [];
  let stopped = false;

  disposers.push(
    bus.lifecycle.on('delivered', ({ delivery, durationMs }) => {
      metrics.deliveries.add(1, { handler: delivery.handler, outcome: 'completed' });
      metrics.handlerDuration.record(durationMs / 1000, { handler: delivery.handler, outcome: 'completed' });
    }),
    bus.lifecycle.on('failed', ({ delivery, durationMs }) => {
      metrics.deliveries.add(1, { handler: delivery.handler, outcome: 'failed' });
      metrics.handlerDuration.record(durationMs / 1000, { handler: delivery.handler, outcome: 'failed' });
    }),
    bus.lifecycle.on('dead', ({ delivery, durationMs }) => {
      metrics.deliveries.add(1, { handler: delivery.handler, outcome: 'dead' });
      metrics.handlerDuration.record(durationMs / 1000, { handler: delivery.handler, outcome: 'dead' });
    }),
    bus.lifecycle.on('lease-lost', ({ delivery, detectedBy }) => {
      metrics.leasesLost.add(1, { handler: delivery.handler, detected_by: detectedBy });
    }),
  );

  const store = bus.store;
  /** Claim size and duration of one claim call of a session. */
  const measured = async <T>(claim: () => Promise<T>, size: (result: T) => number): Promise<T> => {
    if (stopped) return claim();
    const started = performance.now();
    try {
      const result = await claim();
      metrics.claimSize.record(size(result));
      metrics.claimDuration.record((performance.now() - started) / 1000, { result: 'ok' });
      return result;
    } catch (error) {
      metrics.claimDuration.record((performance.now() - started) / 1000, { result: 'error' });
      throw error;
    }
  };
  // Claims run on the claim sessions the dispatcher opens (when it starts, and when a resting loop claims again): each
  // session opened from now on is measured (observe the bus before starting it).
  const restoreClaim = wrapMethod(
    store,
    'openClaims',
    (openClaims: Store<TTx>['openClaims']) =>
      (owner: string, options?: ClaimSessionOptions): ClaimSession => {
        const session = openClaims(owner, options);
        return {
          owner: session.owner,
          claim: (params: ClaimParams) =>
            measured(
              () => session.claim(params),
              (claimed) => claimed.length,
            ),
          // The dispatcher claims with the last batch's completions riding along where the store offers it.
          completeAndClaim: (leases: readonly DeliveryLease[], params: ClaimParams) =>
            measured(
              () => session.completeAndClaim(leases, params),
              (result) => result.claimed.length,
            ),
          forgetInFlight: (holding: readonly string[]) => session.forgetInFlight(holding),
          close: () => session.close(),
        };
      },
  );
  const restoreRenewal = wrapMethod(
    store,
    'extendLease',
    (extend: Store<TTx>['extendLease']) =>
      async (params: ExtendLeaseParams): Promise<ExtendLeaseResult> => {
        const result = await extend(params);
        if (stopped) return result;
        if (result.extended.length > 0) metrics.leaseRenewals.add(result.extended.length, { result: 'extended' });
        if (result.lost.length > 0) metrics.leaseRenewals.add(result.lost.length, { result: 'lost' });
        return result;
      },
  );
  if (restoreClaim === undefined || restoreRenewal === undefined) {
    logger.debug('the store object cannot be wrapped (frozen?); claim and lease renewal metrics are not recorded');
  }
  disposers.push(restoreClaim ?? noop, restoreRenewal ?? noop);

  // Backlog: the last sample, per handler; a handler seen once keeps reporting (0 once drained).
  let lastSample: BusObservation['lastSample'];
  let lastSampleError: string | undefined;
  const seen = new Set(bus.handlers ?? []);
  const gauges: [ObservableGaugeLike, ObservableCallbackLike][] = [];
  const observeGauge = (gauge: ObservableGaugeLike, callback: ObservableCallbackLike): void => {
    gauge.addCallback(callback);
    gauges.push([gauge, callback]);
  };
  const perHandler =
    (read: (counts: HandlerStatistics) => number | null): ObservableCallbackLike =>
    (result) => {
      if (lastSample === undefined) return;
      for (const handler of seen) {
        const counts = lastSample.statistics.handlers[handler];
        const value = counts === undefined ? 0 : read(counts);
        if (value !== null) result.observe(value, { handler });
      }
    };
  for (const [field, name, description] of BACKLOG) {
    observeGauge(
      metrics.gauge(name, '{delivery}', description),
      perHandler((counts) => counts[field] as number),
    );
  }
  observeGauge(
    metrics.gauge(
      'relaybus.backlog.oldest_due_age',
      's',
      'Age of the oldest due delivery (now - available at), per handler; 0 when nothing is due.',
    ),
    perHandler((counts) => (counts.oldestDueAgeMs ?? 0) / 1000),
  );
  observeGauge(
    metrics.gauge('relaybus.lanes.leased', '{lane}', 'Lanes leased by a worker with a live lease.'),
    (result) => {
      if (lastSample !== undefined) result.observe(lastSample.statistics.lanesLeased);
    },
  );
  const perReplay =
    (read: (replay: ReplayView) => number): ObservableCallbackLike =>
    (result) => {
      for (const replay of lastSample?.replays ?? [])
        result.observe(read(replay), { replay: replay.id, mode: replay.mode, handlers: replay.handlers.join(',') });
    };
  observeGauge(
    metrics.gauge('relaybus.replay.created', '{delivery}', 'Deliveries a running replay has created, per replay.'),
    perReplay((replay) => replay.created),
  );
  observeGauge(
    metrics.gauge('relaybus.replay.total', '{delivery}', 'Deliveries a running replay plans to create, per replay.'),
    perReplay((replay) => replay.total),
  );
  disposers.push(() => gauges.forEach(([gauge, callback]) => gauge.removeCallback(callback)));

  /** The running replays; undefined when the store cannot list them (a schema older than replays): no replay gauge. */
  const replays = async (): Promise<ReplayView[] | undefined> => {
    try {
      return await store.listReplays({ state: 'running' });
    } catch {
      return undefined;
    }
  };

  let sampling: Promise<void> | undefined;
  const sample = (): Promise<void> => {
    sampling ??= (async () => {
      try {
        const statistics = await store.statistics();
        for (const handler of Object.keys(statistics.handlers)) seen.add(handler);
        const running = await replays();
        lastSample = { at: new Date(), statistics, ...(running === undefined ? {} : { replays: running }) };
        if (lastSampleError !== undefined) logger.info('backlog sampling works again');
        lastSampleError = undefined;
      } catch (error) {
        if (lastSampleError === undefined)
          logger.warn('sampling the backlog (store.statistics) failed; the backlog metrics keep their last values', {
            error: describeError(error),
          });
        lastSampleError = describeError(error);
      } finally {
        sampling = undefined;
      }
    })();
    return sampling;
  };
  const intervalMs = options.statisticsIntervalMs ?? DEFAULT_STATISTICS_INTERVAL_MS;
  if (intervalMs > 0) {
    void sample();
    const timer = setInterval(() => void sample(), intervalMs);
    timer.unref();
    disposers.push(() => clearInterval(timer));
  }

  return {
    get lastSample() {
      return lastSample;
    },
    get lastSampleError() {
      return lastSampleError;
    },
    sample,
    stop() {
      if (stopped) return;
      stopped = true;
      for (const dispose of disposers.reverse()) dispose();
    },
  };
}

function noop(): void {}

/**
 * Replace `store[name]` with `wrap(original)` on the store object itself (the dispatcher calls the
 * same object), returning the function that undoes it; undefined when the store has no such method
 * or the object refuses the write.
 */
function wrapMethod<F extends (...args: never[]) => unknown>(
  store: object,
  name: string,
  wrap: (original: F) => F,
): (() => void) | undefined {
  const target = store as Record<string, unknown>;
  const own = Object.hasOwn(store, name);
  const previous = target[name];
  if (typeof previous !== 'function') return undefined;
  const original = previous.bind(store) as F;
  const wrapped = wrap(original);
  try {
    Object.defineProperty(store, name, { value: wrapped, writable: true, configurable: true, enumerable: own });
  } catch {
    return undefined;
  }
  return () => {
    if (target[name] !== wrapped) return; // wrapped again since: leave the chain alone
    if (own)
      Object.defineProperty(store, name, { value: previous, writable: true, configurable: true, enumerable: true });
    else delete target[name];
  };
}
