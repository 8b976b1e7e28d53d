/**
 * Scenario "dispatch": N deliveries preloaded (N / 2 events, two handlers each, keyed with 10
 * events per key or unkeyed, published by one publisher process in batches of 500 and ANALYZEd as
 * autovacuum would), then D dispatcher processes drain them with a no-op handler. The clock starts
 * at "go", after every process has loaded its code and run its library's start-up (pool opened,
 * schema checks; see DispatcherHandle.prepare). Rate = deliveries / (last handler start - go).
 * The lane table is analyzed while no lane is owned: the stale-statistics case of the trap.
 */
import { timeline } from '../lib/timeline.js';
import { publishWith } from '../lib/procs.js';
import { HANDLERS, type Contender, type DispatcherSettings } from '../lib/types.js';
import type { KeyMap } from '../lib/keys.js';
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

export interface DispatchCell {
  readonly deliveries: number;
  readonly dispatchers: number;
  readonly eventsPerKey: number;
  /** The handler: 'noop' (default) or 'yield' (waits one event-loop turn, so overlaps show; ad hoc --handler yield). */
  readonly handler?: 'noop' | 'yield';
}

export function dispatchCellName(cell: DispatchCell): string {
  return `dispatch N=${cell.deliveries} D=${cell.dispatchers}${cell.handler === 'yield' ? ' yielding handler' : ''}`;
}

export async function runDispatch(
  context: RunContext,
  contender: Contender,
  entry: Entry,
  settings: DispatcherSettings,
  cell: DispatchCell,
  rep: number,
): Promise<RunRecord> {
  const events = Math.ceil(cell.deliveries / HANDLERS.length);
  const keys = Math.max(1, Math.ceil(events / cell.eventsPerKey));
  const cellName = dispatchCellName(cell);
  return withSchema(context, forVariant(contender, entry.variant), async (schema) => {
    const [preload] = await publishWith({ contender: contender.name, url: context.url, schema, poolSize: 2 }, [
      {
        kind: 'count',
        count: events,
        batch: 500,
        publisher: 0,
        publishers: 1,
        keysPerPublisher: keys,
        keyed: entry.keyed,
      },
    ]);
    if (preload?.error || preload?.published !== events)
      throw new Error(`preload failed: ${preload?.error ?? preload?.published}`);
    await analyzeSchema(context.admin, schema);
    const keyMap: KeyMap = entry.keyed ? { kind: 'modulo', publishers: 1, keysPerPublisher: keys } : { kind: 'none' };
    const total = events * HANDLERS.length;
    const run = await drain(context, contender, schema, settings, cell.dispatchers, total, {
      mode: cell.handler ?? 'noop',
      keys: keyMap,
    });
    const { records, out, go } = run;
    const published = Int32Array.from({ length: events }, (_, i) => i);
    const overlapsSeen = out.reduce((sum, o) => sum + o.overlaps, 0);
    const checked = validate(published, records, keyMap, contender.ordersKeys, run.remaining, overlapsSeen);
    const extra = [
      ...(run.timedOut ? [`timeout after ${context.timeoutMs} ms`] : []),
      ...(run.errors ? ['a dispatcher failed'] : []),
    ];
    const exactness = extra.length ? { ...checked, valid: false, reasons: [...checked.reasons, ...extra] } : checked;
    let first = Infinity;
    let last = go;
    for (const t of records.t) {
      if (t > last) last = t;
      if (t < first) first = t;
    }
    const seconds = (last - go) / 1000;
    if (process.env.BENCH_TIMELINE) context.log(`${cellName} ${entry.variant} rep ${rep}: ${timeline(records.t, go)}`);
    const statements = mergeStatements(out.map((o) => o.statements));
    const db = await dbFigures(context.admin, contender, run.before, run.after, total, statements, context.walinspect);
    return {
      scenario: 'dispatch',
      cell: cellName,
      contender: contender.name,
      variant: entry.variant,
      keyed: entry.keyed,
      rep,
      valid: exactness.valid,
      exactness,
      rate: records.i.length / seconds,
      figures: {
        seconds,
        deliveries: total,
        firstHandlerMs: Number.isFinite(first) ? first - go : null,
        dispatcherCpuUsPerDelivery: (out.reduce((sum, o) => sum + o.cpuMs, 0) * 1000) / records.i.length,
        // Deliveries/s to the moment nothing was pending (the last completion committed), beside the rate to the last
        // handler start.
        drainedRate: run.drainedAt === undefined ? null : records.i.length / ((run.drainedAt - go) / 1000),
      },
      db,
      profile: profile(statements),
      warnings: mergeWarnings(out),
      ...(run.errors ? { error: run.errors } : {}),
    };
  });
}
