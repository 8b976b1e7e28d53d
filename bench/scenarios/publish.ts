/**
 * Scenario "publish": P publisher processes, each publishing keyed events in caller transactions of
 * `batch` events (BEGIN, publish, COMMIT) for a fixed window. Figures: events/s, publish-call
 * p50/p99 (ms, the whole BEGIN..COMMIT), WAL bytes per event. Exactness: the contender holds exactly
 * one pending delivery (job, row) per published event and handler, and nothing else.
 */
import { snapshot } from '../lib/db.js';
import { publishWith } from '../lib/procs.js';
import { percentile, sleep } from '../lib/stats.js';
import { HANDLERS, type Contender } from '../lib/types.js';
import { dbFigures, mergeStatements } from '../metrics.js';
import type { Exactness } from '../validate.js';
import { withSchema, type RunContext, type RunRecord } from './common.js';

export interface PublishCell {
  readonly publishers: number;
  readonly batch: number;
  readonly windowMs: number;
}

export function publishCellName(cell: PublishCell): string {
  return `publish P=${cell.publishers} batch=${cell.batch}`;
}

export async function runPublish(context: RunContext, contender: Contender, cell: PublishCell, rep: number): Promise<RunRecord> {
  return withSchema(context, contender, async (schema) => {
    const before = await snapshot(context.admin, schema);
    const plans = Array.from({ length: cell.publishers }, (_, publisher) => ({
      kind: 'window' as const, durationMs: cell.windowMs, batch: cell.batch, publisher, publishers: cell.publishers, keysPerPublisher: 1000,
    }));
    const results = await publishWith({ contender: contender.name, url: context.url, schema, poolSize: 2 }, plans);
    await sleep(300);
    const after = await snapshot(context.admin, schema);
    const published = results.reduce((sum, r) => sum + r.published, 0);
    const started = Math.min(...results.map((r) => r.startedAt));
    const ended = Math.max(...results.map((r) => r.endedAt));
    const calls = new Float64Array(results.reduce((sum, r) => sum + r.calls.length, 0));
    let offset = 0;
    for (const r of results) { calls.set(r.calls, offset); offset += r.calls.length; }
    const remaining = await contender.remaining(context.admin, schema);
    const expected = published * HANDLERS.length;
    const errors = results.map((r) => r.error).filter(Boolean).join('\n');
    const reasons = [
      ...(remaining.pending !== expected ? [`${remaining.pending} deliveries stored for ${expected} published`] : []),
      ...(remaining.dead ? [`${remaining.dead} dead`] : []),
      ...(errors ? ['a publisher failed'] : []),
    ];
    const exactness: Exactness = {
      valid: reasons.length === 0, expected, handled: 0, lost: Math.max(0, expected - remaining.pending), unexpected: Math.max(0, remaining.pending - expected),
      duplicates: 0, orderViolations: null, pending: remaining.pending, dead: remaining.dead, reasons,
    };
    const statements = mergeStatements(results.map((r) => r.statements));
    const db = await dbFigures(context.admin, contender, before, after, published, statements, context.walinspect);
    return {
      scenario: 'publish', cell: publishCellName(cell), contender: contender.name, variant: 'default', rep, valid: exactness.valid, exactness,
      rate: published / ((ended - started) / 1000),
      figures: { events: published, callP50Ms: percentile(calls, 50), callP99Ms: percentile(calls, 99) },
      db, ...(errors ? { error: errors } : {}),
    };
  });
}
