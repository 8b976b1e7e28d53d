/**
 * Scenario "liveness": a deep backlog on a few keys whose heads fail once and back off, in the same
 * lanes as many healthy keys. Published by one process, in this order (batches of 500): the failing
 * keys' events (round robin over the keys, so each key's first event is its head), then the healthy
 * keys' events (round robin). Every key is in a lane of a failing key (src/core/lanes.ts laneOf),
 * so a claim that lets blocked followers fill its scan of a lane starves the healthy keys there.
 *
 * Arms, run back to back in every repetition:
 *   "failing heads": the whole workload; the first attempt of each failing key's head (both
 *     handlers) throws, with a constant backoff of `backoffMs` (no jitter);
 *   "healthy keys only": the healthy keys' events alone (same events, same keys, same lanes): the
 *     throughput the healthy keys have when nothing else is in their lanes, the reference;
 *   "deep keys without failures" (bench:full): the whole workload, nothing throws: tells a stall caused
 *     by the deep backlog itself from one caused by the failing heads.
 * Figures: healthy deliveries/s (healthy deliveries / (last healthy handler start - go)); the time
 * from a failed head becoming due to its retry's start, p50 and max, twice: from the due time the
 * library set (relaybus: the failed event's retryAt), and from the throw + backoff (a lower bound of
 * "due" for any contender: a library computes the due time after it sees the failure, which under a
 * batch of 500 launched at once is tens of milliseconds after the throw); all deliveries/s. Exactness as in dispatch (every delivery handled once, per-key
 * order, no overlap: the handler waits one event-loop turn so overlaps are visible), plus: every
 * planned failure happened exactly once.
 */
import { laneOfKey, type KeyMap } from '../lib/keys.js';
import { publishWith } from '../lib/procs.js';
import { percentile } from '../lib/stats.js';
import { timeline } from '../lib/timeline.js';
import { HANDLERS, type Contender, type DispatcherSettings } from '../lib/types.js';
import { dbFigures, mergeStatements, profile } from '../metrics.js';
import { validate } from '../validate.js';
import {
  analyzeSchema,
  forVariant,
  mergeWarnings,
  withSchema,
  type Entry,
  type RunContext,
  type RunRecord,
} from './common.js';
import { drain } from './drain.js';

export interface LivenessCell {
  readonly failingKeys: number;
  readonly eventsPerFailingKey: number;
  readonly healthyKeys: number;
  readonly eventsPerHealthyKey: number;
  readonly backoffMs: number;
  /** The handler (default 'yield': one event-loop turn, so overlaps show; ad hoc --handler noop). */
  readonly handler?: 'noop' | 'yield';
}

export const LIVENESS_ARMS = ['failing heads', 'healthy keys only', 'deep keys without failures'] as const;
/** The arm the target compares "failing heads" with. */
export const LIVENESS_REFERENCE: LivenessArm = 'healthy keys only';
export type LivenessArm = (typeof LIVENESS_ARMS)[number];

export function livenessCellName(cell: LivenessCell): string {
  return `liveness ${cell.failingKeys}x${cell.eventsPerFailingKey} failing, ${cell.healthyKeys}x${cell.eventsPerHealthyKey} healthy, backoff ${cell.backoffMs} ms${cell.handler === 'noop' ? ', no-op handler' : ''}`;
}

/** The workload: key number per event (event i = position in publish order) and the failing heads. */
export function livenessWorkload(cell: LivenessCell): { keys: Int32Array; heads: Int32Array; healthyFrom: number } {
  // Failing keys: the first key numbers with pairwise different lanes.
  const failing: number[] = [];
  const lanes = new Set<number>();
  for (let n = 0; failing.length < cell.failingKeys; n += 1) {
    const lane = laneOfKey(n);
    if (!lanes.has(lane)) {
      lanes.add(lane);
      failing.push(n);
    }
  }
  // Healthy keys: further key numbers whose lane is one of the failing keys' lanes.
  const healthy: number[] = [];
  for (let n = 1_000_000; healthy.length < cell.healthyKeys; n += 1) if (lanes.has(laneOfKey(n))) healthy.push(n);
  const failingEvents = cell.failingKeys * cell.eventsPerFailingKey;
  const keys = new Int32Array(failingEvents + cell.healthyKeys * cell.eventsPerHealthyKey);
  for (let i = 0; i < failingEvents; i += 1) keys[i] = failing[i % failing.length]!;
  for (let i = failingEvents; i < keys.length; i += 1) keys[i] = healthy[(i - failingEvents) % healthy.length]!;
  const heads = Int32Array.from({ length: failing.length }, (_, k) => k);
  return { keys, heads, healthyFrom: failingEvents };
}

export async function runLiveness(
  context: RunContext,
  contender: Contender,
  entry: Entry,
  settings: DispatcherSettings,
  cell: LivenessCell,
  arm: LivenessArm,
  rep: number,
): Promise<RunRecord> {
  const { keys, heads, healthyFrom } = livenessWorkload(cell);
  const from = arm === 'healthy keys only' ? healthyFrom : 0;
  const events = keys.length - from;
  return withSchema(context, forVariant(contender, entry.variant), async (schema) => {
    const [preload] = await publishWith({ contender: contender.name, url: context.url, schema, poolSize: 2 }, [
      { kind: 'list', list: keys, from, batch: 500, publisher: 0, publishers: 1, keysPerPublisher: 0, keyed: true },
    ]);
    if (preload?.error || preload?.published !== events)
      throw new Error(`preload failed: ${preload?.error ?? preload?.published}`);
    await analyzeSchema(context.admin, schema);
    const keyMap: KeyMap = { kind: 'table', keys };
    const failing = arm === 'failing heads';
    const total = events * HANDLERS.length;
    const run = await drain(context, contender, schema, settings, 1, total, {
      mode: cell.handler ?? 'yield',
      keys: keyMap,
      ...(failing ? { failFirst: heads, retryBackoffMs: cell.backoffMs } : { retryBackoffMs: cell.backoffMs }),
    });
    const { records, out, go } = run;
    const published = Int32Array.from({ length: events }, (_, k) => from + k);
    const checked = validate(
      published,
      records,
      keyMap,
      contender.ordersKeys,
      run.remaining,
      out.reduce((sum, o) => sum + o.overlaps, 0),
    );
    // Planned failures: each failing head, each handler, exactly once.
    const failures = out.flatMap((o) =>
      Array.from(o.failures.i, (i, k) => ({ i, h: o.failures.h[k]!, t: o.failures.t[k]! })),
    );
    const planned = failing ? heads.length * HANDLERS.length : 0;
    const extra = [
      ...(run.timedOut ? [`timeout after ${context.timeoutMs} ms`] : []),
      ...(run.errors ? ['a dispatcher failed'] : []),
      ...(failures.length !== planned ? [`${failures.length} planned failures happened, ${planned} planned`] : []),
    ];
    const exactness = extra.length ? { ...checked, valid: false, reasons: [...checked.reasons, ...extra] } : checked;
    // Retry lag: start of the successful attempt - (throw + backoff).
    const startOf = new Map<number, number>();
    for (let r = 0; r < records.i.length; r += 1)
      if (records.i[r]! < healthyFrom) startOf.set(records.i[r]! * 2 + records.h[r]!, records.t[r]!);
    const lags = failures
      .map((f) => (startOf.get(f.i * 2 + f.h) ?? NaN) - (f.t + cell.backoffMs))
      .filter(Number.isFinite);
    // Due -> start, where the contender reports the due time its library set (relaybus: the failed event's retryAt).
    const dueLags = out
      .flatMap((o) => Array.from(o.retryDues.i, (i, k) => ({ i, h: o.retryDues.h[k]!, t: o.retryDues.t[k]! })))
      .map((d) => (startOf.get(d.i * 2 + d.h) ?? NaN) - d.t)
      .filter(Number.isFinite);
    // Each retry's due time and start (machine-clock ms), to set beside the dispatcher's debug lines (what ran when it was due).
    if (process.env.BENCH_DEBUG)
      for (const o of out)
        for (let k = 0; k < o.retryDues.i.length; k += 1) {
          const due = o.retryDues.t[k]!;
          const start = startOf.get(o.retryDues.i[k]! * 2 + o.retryDues.h[k]!) ?? NaN;
          context.log(`retry due ${due.toFixed(1)} started ${start.toFixed(1)} (${(start - due).toFixed(1)} ms after)`);
        }
    let healthy = 0;
    let lastHealthy = go;
    let last = go;
    for (let r = 0; r < records.i.length; r += 1) {
      const t = records.t[r]!;
      if (t > last) last = t;
      if (records.i[r]! >= healthyFrom) {
        healthy += 1;
        if (t > lastHealthy) lastHealthy = t;
      }
    }
    if (process.env.BENCH_TIMELINE) {
      const name = `${livenessCellName(cell)} [${arm}] ${entry.variant} rep ${rep}`;
      context.log(`${name} healthy keys: ${timeline(records.t, go, (r) => records.i[r]! >= healthyFrom)}`);
      if (from === 0) context.log(`${name} deep keys: ${timeline(records.t, go, (r) => records.i[r]! < healthyFrom)}`);
    }
    const statements = mergeStatements(out.map((o) => o.statements));
    const db = await dbFigures(context.admin, contender, run.before, run.after, total, statements, context.walinspect);
    const healthyRate = healthy / ((lastHealthy - go) / 1000);
    return {
      scenario: 'liveness',
      cell: livenessCellName(cell),
      contender: contender.name,
      variant: entry.variant,
      keyed: true,
      tag: arm,
      rep,
      valid: exactness.valid,
      exactness,
      rate: healthyRate,
      figures: {
        healthyDeliveries: healthy,
        healthySeconds: (lastHealthy - go) / 1000,
        allDeliveriesPerSec: records.i.length / ((last - go) / 1000),
        allSeconds: (last - go) / 1000,
        failures: failures.length,
        retryLagP50Ms: lags.length ? percentile(lags, 50) : null,
        retryLagMaxMs: lags.length ? Math.max(...lags) : null,
        retryDueLagP50Ms: dueLags.length ? percentile(dueLags, 50) : null,
        retryDueLagMaxMs: dueLags.length ? Math.max(...dueLags) : null,
        pollIntervalMs: settings.pollIntervalMs,
      },
      db,
      profile: profile(statements),
      warnings: mergeWarnings(out),
      ...(run.errors ? { error: run.errors } : {}),
    };
  });
}
