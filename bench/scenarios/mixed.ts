/**
 * Scenario "mixed": P publisher processes offer a fixed total rate of keyed events (one event per
 * caller transaction, paced) for a warm-up and then a measured window while D dispatcher processes run; then
 * the backlog drains. Figures (of deliveries committed in the window): achieved deliveries/s, commit-to-handler-start
 * latency p50/p95/p99 (commit = when COMMIT returned in the publisher; start = when the handler was entered, both
 * on the machine's monotonic clock), backlog max (committed deliveries not yet started, from the logs: no polling load on
 * the database); and the warm-up's p99 on its own (start-up: the dispatchers start with the publishers).
 */
import { writeFileSync } from 'node:fs';
import { snapshot } from '../lib/db.js';
import type { KeyMap } from '../lib/keys.js';
import { startDispatcher, startPublisher } from '../lib/procs.js';
import { wallClockOffset } from '../lib/recorder.js';
import { percentile, sleep } from '../lib/stats.js';
import { HANDLERS, type Contender, type DispatcherSettings } from '../lib/types.js';
import { dbFigures, mergeStatements, profile } from '../metrics.js';
import { mergeRecords, validate } from '../validate.js';
import type { DispatcherResult, PublisherResult } from '../child.js';
import { forVariant, mergeWarnings, withSchema, type Entry, type RunContext, type RunRecord } from './common.js';

export interface MixedCell {
  readonly ratePerSec: number;
  /** The measured window (after the warm-up). */
  readonly windowMs: number;
  /**
   * Publishing at the offered rate before the measured window: every contender's dispatcher starts at 'go' with the
   * publishers, so the warm-up holds their start-up (first claims, statements prepared and planned per connection, code
   * not yet optimised by V8). Its latency is reported on its own (`startupP99Ms`), not mixed into the window's.
   */
  readonly warmupMs: number;
  readonly publishers: number;
  readonly dispatchers: number;
}

export function mixedCellName(cell: MixedCell): string {
  return `mixed ${cell.ratePerSec} ev/s ${cell.windowMs / 1000}s (+${cell.warmupMs / 1000}s warm-up) P=${cell.publishers} D=${cell.dispatchers}`;
}

const KEYS_PER_PUBLISHER = 200;

export async function runMixed(
  context: RunContext,
  contender: Contender,
  entry: Entry,
  settings: DispatcherSettings,
  cell: MixedCell,
  rep: number,
): Promise<RunRecord> {
  // key of event i = n * P + p: (n % K) * P + p
  const keyMap: KeyMap = entry.keyed
    ? { kind: 'modulo', publishers: cell.publishers, keysPerPublisher: KEYS_PER_PUBLISHER }
    : { kind: 'none' };
  return withSchema(context, forVariant(contender, entry.variant), async (schema) => {
    const handler = { mode: 'noop' as const, keys: keyMap };
    const dispatchers = Array.from({ length: cell.dispatchers }, (_, slot) =>
      startDispatcher(
        { contender: contender.name, url: context.url, schema, poolSize: settings.poolSize, settings, handler },
        slot,
        cell.dispatchers,
      ),
    );
    const publishers = Array.from({ length: cell.publishers }, () =>
      startPublisher({ contender: contender.name, url: context.url, schema, poolSize: 1 }),
    );
    try {
      const t0 = Date.now();
      await Promise.all([...dispatchers, ...publishers].map((c) => c.next('ready')));
      const tReady = Date.now();
      const before = await snapshot(context.admin, schema);
      for (const d of dispatchers) d.send({ type: 'go' });
      const pubResults = Promise.all(publishers.map((p) => p.next<PublisherResult>('result')));
      publishers.forEach((p, publisher) =>
        p.send({
          type: 'go',
          plan: {
            kind: 'rate',
            ratePerSec: cell.ratePerSec / cell.publishers,
            durationMs: cell.warmupMs + cell.windowMs,
            batch: 1,
            publisher,
            publishers: cell.publishers,
            keysPerPublisher: KEYS_PER_PUBLISHER,
            keyed: entry.keyed,
          },
        }),
      );
      const pubs = await pubResults;
      const published = pubs.reduce((sum, p) => sum + p.published, 0);
      const total = published * HANDLERS.length;
      const deadline = Date.now() + context.timeoutMs;
      let timedOut = false;
      while (dispatchers.reduce((sum, c) => sum + c.handled, 0) < total) {
        if (Date.now() > deadline) {
          timedOut = true;
          break;
        }
        await sleep(50);
      }
      const tHandled = Date.now();
      const drainDeadline = Date.now() + 10_000;
      while (!timedOut && (await contender.remaining(context.admin, schema)).pending > 0 && Date.now() < drainDeadline)
        await sleep(50);
      const tDrained = Date.now();
      const results = Promise.all(dispatchers.map((c) => c.next<DispatcherResult>('result')));
      for (const c of dispatchers) c.send({ type: 'stop' });
      const out = await results;
      await Promise.all([...dispatchers, ...publishers].map((c) => c.exited()));
      if (process.env.BENCH_DEBUG)
        context.log(
          `phases: ready ${tReady - t0} ms, window+handled ${tHandled - tReady} ms, drained ${tDrained - tHandled} ms, stopped ${Date.now() - tDrained} ms`,
        );
      await sleep(300);
      const after = await snapshot(context.admin, schema);
      const records = mergeRecords(out.map((o) => o.records));
      const remaining = await contender.remaining(context.admin, schema);
      const commitI = new Int32Array(pubs.reduce((sum, p) => sum + p.commitI.length, 0));
      const commitT = new Float64Array(commitI.length);
      let offset = 0;
      for (const p of pubs) {
        commitI.set(p.commitI, offset);
        commitT.set(p.commitT, offset);
        offset += p.commitI.length;
      }
      const errors = [...out.map((o) => o.error), ...pubs.map((p) => p.error)].filter(Boolean).join('\n');
      const checked = validate(
        commitI,
        records,
        keyMap,
        contender.ordersKeys,
        remaining,
        out.reduce((sum, o) => sum + o.overlaps, 0),
      );
      const extra = [
        ...(timedOut ? [`timeout after ${context.timeoutMs} ms`] : []),
        ...(errors ? ['a process failed'] : []),
      ];
      const exactness = extra.length ? { ...checked, valid: false, reasons: [...checked.reasons, ...extra] } : checked;

      // Latency and backlog from the logs; the window starts after the warm-up (see MixedCell.warmupMs).
      const windowStart = Math.min(...pubs.map((p) => p.startedAt)) + cell.warmupMs;
      const windowEnd = Math.max(...pubs.map((p) => p.endedAt));
      const commitOf = new Map<number, number>();
      for (let k = 0; k < commitI.length; k += 1) commitOf.set(commitI[k]!, commitT[k]!);
      const measured: number[] = [];
      const startup: number[] = [];
      // BENCH_LATENCY_DUMP=<prefix>: each measured delivery's commit and handler start (wall-clock ms, as of the dump),
      // to set beside the dispatcher's claims (BENCH_DEBUG) and the server's log and see what the slowest waited for.
      const dump = process.env.BENCH_LATENCY_DUMP;
      const pairs: [number, number][] = [];
      for (let r = 0; r < records.i.length; r += 1) {
        const committedAt = commitOf.get(records.i[r]!);
        if (committedAt === undefined) continue;
        const inWindow = committedAt >= windowStart;
        (inWindow ? measured : startup).push(records.t[r]! - committedAt);
        if (dump && inWindow) pairs.push([committedAt, records.t[r]!]);
      }
      if (dump) {
        const offset = wallClockOffset();
        const wall = pairs.map(([committed, started]) => [committed + offset, started + offset]);
        writeFileSync(`${dump}.${contender.name}.${entry.variant}.${rep}.json`, JSON.stringify(wall));
      }
      const latencies = Float64Array.from(measured);
      const steps: [number, number][] = [];
      for (const t of commitT) steps.push([t, HANDLERS.length]);
      for (const t of records.t) steps.push([t, -1]);
      steps.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
      let backlog = 0;
      let backlogMax = 0;
      for (const [t, delta] of steps) {
        backlog += delta;
        if (t >= windowStart && backlog > backlogMax) backlogMax = backlog;
      }
      let inWindow = 0;
      for (const t of records.t) if (t >= windowStart && t <= windowEnd) inWindow += 1;
      let publishedInWindow = 0;
      for (const t of commitT) if (t >= windowStart) publishedInWindow += 1;
      const statements = mergeStatements(out.map((o) => o.statements));
      const db = await dbFigures(
        context.admin,
        contender,
        before,
        after,
        records.i.length,
        statements,
        context.walinspect,
      );
      return {
        scenario: 'mixed',
        cell: mixedCellName(cell),
        contender: contender.name,
        variant: entry.variant,
        keyed: entry.keyed,
        rep,
        valid: exactness.valid,
        exactness,
        rate: inWindow / ((windowEnd - windowStart) / 1000),
        figures: {
          offeredDeliveriesPerSec: cell.ratePerSec * HANDLERS.length,
          publishedEventsPerSec: publishedInWindow / ((windowEnd - windowStart) / 1000),
          latencyP50Ms: percentile(latencies, 50),
          latencyP95Ms: percentile(latencies, 95),
          latencyP99Ms: percentile(latencies, 99),
          startupP99Ms: percentile(Float64Array.from(startup), 99),
          backlogMax,
        },
        db,
        profile: profile(statements),
        warnings: mergeWarnings(out),
        ...(errors ? { error: errors } : {}),
      };
    } finally {
      [...dispatchers, ...publishers].forEach((c) => c.kill());
    }
  });
}
