/**
 * Scenario "publish": P publisher processes, each publishing events (keyed or unkeyed) in caller
 * transactions of `batch` events (BEGIN, publish, COMMIT) for a fixed window. Figures: events/s,
 * publish-call p50/p99 (ms, the whole BEGIN..COMMIT), WAL bytes per event. Exactness: the stored
 * pending deliveries (jobs, rows), as (event, handler) pairs, are exactly the published events
 * times the handlers: none lost, none unexpected, none twice. The entry's variant picks the
 * contender's publish path (relaybus: contenders/relaybus.ts PUBLISH_VARIANTS; the others have one,
 * 'default'): it reaches the setup (objects a path needs, before the clock) and every publisher process.
 */
import { snapshot } from '../lib/db.js';
import { publishWith } from '../lib/procs.js';
import { percentile, sleep } from '../lib/stats.js';
import { HANDLERS, type Contender } from '../lib/types.js';
import { dbFigures, mergeStatements } from '../metrics.js';
import { comparePairs, type Exactness } from '../validate.js';
import { withSchema, type Entry, type RunContext, type RunRecord } from './common.js';

export interface PublishCell {
  readonly publishers: number;
  readonly batch: number;
  readonly windowMs: number;
}

export function publishCellName(cell: PublishCell): string {
  return `publish P=${cell.publishers} batch=${cell.batch}`;
}

export async function runPublish(
  context: RunContext,
  contender: Contender,
  entry: Entry,
  cell: PublishCell,
  rep: number,
): Promise<RunRecord> {
  return withSchema(
    context,
    contender,
    async (schema) => {
      const before = await snapshot(context.admin, schema);
      const plans = Array.from({ length: cell.publishers }, (_, publisher) => ({
        kind: 'window' as const,
        durationMs: cell.windowMs,
        batch: cell.batch,
        publisher,
        publishers: cell.publishers,
        keysPerPublisher: 1000,
        keyed: entry.keyed,
      }));
      const results = await publishWith(
        { contender: contender.name, url: context.url, schema, poolSize: 2, variant: entry.variant },
        plans,
      );
      await sleep(300);
      const after = await snapshot(context.admin, schema);
      const published = results.reduce((sum, r) => sum + r.published, 0);
      const started = Math.min(...results.map((r) => r.startedAt));
      const ended = Math.max(...results.map((r) => r.endedAt));
      const calls = new Float64Array(results.reduce((sum, r) => sum + r.calls.length, 0));
      let offset = 0;
      for (const r of results) {
        calls.set(r.calls, offset);
        offset += r.calls.length;
      }
      const committed = new Int32Array(results.reduce((sum, r) => sum + r.committed.length, 0));
      offset = 0;
      for (const r of results) {
        committed.set(r.committed, offset);
        offset += r.committed.length;
      }
      const remaining = await contender.remaining(context.admin, schema);
      const stored = await contender.stored(context.admin, schema);
      const { lost, unexpected, duplicates } = comparePairs(committed, stored);
      const expected = committed.length * HANDLERS.length;
      const errors = results
        .map((r) => r.error)
        .filter(Boolean)
        .join('\n');
      const reasons = [
        ...(lost ? [`${lost} published (event, handler) pairs not stored`] : []),
        ...(unexpected ? [`${unexpected} stored pairs never published`] : []),
        ...(duplicates ? [`${duplicates} pairs stored twice`] : []),
        ...(remaining.pending !== expected
          ? [`${remaining.pending} deliveries pending for ${expected} published`]
          : []),
        ...(remaining.dead ? [`${remaining.dead} dead`] : []),
        ...(errors ? ['a publisher failed'] : []),
      ];
      const exactness: Exactness = {
        valid: reasons.length === 0,
        expected,
        handled: 0,
        lost,
        unexpected,
        duplicates,
        orderViolations: null,
        pending: remaining.pending,
        dead: remaining.dead,
        reasons,
      };
      const statements = mergeStatements(results.map((r) => r.statements));
      const db = await dbFigures(context.admin, contender, before, after, published, statements, context.walinspect);
      return {
        scenario: 'publish',
        cell: publishCellName(cell),
        contender: contender.name,
        variant: entry.variant,
        keyed: entry.keyed,
        rep,
        valid: exactness.valid,
        exactness,
        rate: published / ((ended - started) / 1000),
        figures: { events: published, callP50Ms: percentile(calls, 50), callP99Ms: percentile(calls, 99) },
        db,
        ...(errors ? { error: errors } : {}),
      };
    },
    entry.variant,
  );
}
