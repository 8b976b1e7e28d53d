/**
 * Scenario "dispatch": N deliveries preloaded (N / 2 keyed events, two handlers each, 10 events per
 * key, published by one publisher process in batches of 500 and ANALYZEd as autovacuum would), then
 * D dispatcher processes drain them with a no-op handler. Rate = deliveries / (last handler start -
 * "go"). The lane table is analyzed while no lane is owned: the stale-statistics case of the trap.
 */
import { publishWith, startDispatcher } from '../lib/procs.js';
import { snapshot } from '../lib/db.js';
import { sleep } from '../lib/stats.js';
import { HANDLERS, type Contender, type DispatcherSettings } from '../lib/types.js';
import { dbFigures, mergeStatements, profile } from '../metrics.js';
import { mergeRecords, validate } from '../validate.js';
import type { DispatcherResult } from '../child.js';
import { analyzeSchema, withSchema, type RunContext, type RunRecord } from './common.js';

export interface DispatchCell {
  readonly deliveries: number;
  readonly dispatchers: number;
  readonly eventsPerKey: number;
}

export function dispatchCellName(cell: DispatchCell): string {
  return `dispatch N=${cell.deliveries} D=${cell.dispatchers}`;
}

export async function runDispatch(
  context: RunContext, contender: Contender, variant: string, settings: DispatcherSettings, cell: DispatchCell, rep: number,
): Promise<RunRecord> {
  const events = Math.ceil(cell.deliveries / HANDLERS.length);
  const keys = Math.max(1, Math.ceil(events / cell.eventsPerKey));
  const cellName = dispatchCellName(cell);
  return withSchema(context, contender, async (schema) => {
    const [preload] = await publishWith({ contender: contender.name, url: context.url, schema, poolSize: 2 }, [
      { kind: 'count', count: events, batch: 500, publisher: 0, publishers: 1, keysPerPublisher: keys },
    ]);
    if (preload?.error || preload?.published !== events) throw new Error(`preload failed: ${preload?.error ?? preload?.published}`);
    await analyzeSchema(context.admin, schema);
    const init = { contender: contender.name, url: context.url, schema, poolSize: settings.poolSize, settings };
    const children = Array.from({ length: cell.dispatchers }, (_, slot) => startDispatcher(init, slot, cell.dispatchers));
    try {
      await Promise.all(children.map((c) => c.next('ready')));
      const before = await snapshot(context.admin, schema);
      const go = performance.timeOrigin + performance.now();
      for (const c of children) c.send({ type: 'go' });
      const total = events * HANDLERS.length;
      const deadline = Date.now() + context.timeoutMs;
      let timedOut = false;
      while (children.reduce((sum, c) => sum + c.handled, 0) < total) {
        if (Date.now() > deadline) { timedOut = true; break; }
        await sleep(50);
      }
      // Let the last completions commit (bounded), then stop gracefully.
      const drainDeadline = Date.now() + 10_000;
      while (!timedOut && (await contender.remaining(context.admin, schema)).pending > 0 && Date.now() < drainDeadline) await sleep(50);
      const results = Promise.all(children.map((c) => c.next<DispatcherResult>('result')));
      for (const c of children) c.send({ type: 'stop' });
      const out = await results;
      await Promise.all(children.map((c) => c.exited()));
      await sleep(300);
      const after = await snapshot(context.admin, schema);
      const records = mergeRecords(out.map((o) => o.records));
      const remaining = await contender.remaining(context.admin, schema);
      const published = Int32Array.from({ length: events }, (_, i) => i);
      const errors = out.map((o) => o.error).filter(Boolean).join('\n');
      const checked = validate(published, records, (i) => i % keys, contender.ordered, remaining);
      const extra = [...(timedOut ? [`timeout after ${context.timeoutMs} ms`] : []), ...(errors ? ['a dispatcher failed'] : [])];
      const exactness = extra.length ? { ...checked, valid: false, reasons: [...checked.reasons, ...extra] } : checked;
      let last = go;
      for (const t of records.t) if (t > last) last = t;
      const seconds = (last - go) / 1000;
      const statements = mergeStatements(out.map((o) => o.statements));
      const db = await dbFigures(context.admin, contender, before, after, total, statements, context.walinspect);
      return {
        scenario: 'dispatch', cell: cellName, contender: contender.name, variant, rep, valid: exactness.valid, exactness,
        rate: records.i.length / seconds, figures: { seconds, deliveries: total, dispatcherCpuUsPerDelivery: (out.reduce((sum, o) => sum + o.cpuMs, 0) * 1000) / records.i.length }, db, profile: profile(statements),
        ...(errors ? { error: errors } : {}),
      };
    } finally {
      children.forEach((c) => c.kill());
    }
  });
}
