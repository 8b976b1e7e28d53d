/**
 * Drain a preloaded backlog: fork D dispatcher processes, wait until each has run its library's
 * start-up ("ready"), snapshot the database, send "go" (the clock starts), wait until `total`
 * successful handler runs were recorded and nothing is pending, stop them gracefully, snapshot
 * again after every process has exited. Shared by the dispatch and liveness scenarios.
 */
import type { DispatcherResult, HandlerPlan } from '../child.js';
import { snapshot, type Snapshot } from '../lib/db.js';
import { startPerfRecord } from '../lib/perf-record.js';
import { startDispatcher } from '../lib/procs.js';
import { machineNow } from '../lib/recorder.js';
import { sleep } from '../lib/stats.js';
import type { Contender, DispatcherSettings, Remaining } from '../lib/types.js';
import { mergeRecords, type Records } from '../validate.js';
import type { RunContext } from './common.js';

export interface Drained {
  /** "go" (ms, epoch-based, as the records). */
  readonly go: number;
  /** When the database first had nothing pending after every handler ran (same clock; to `DRAIN_POLL_MS`). */
  readonly drainedAt: number | undefined;
  readonly out: readonly DispatcherResult[];
  readonly records: Records;
  readonly timedOut: boolean;
  readonly before: Snapshot;
  readonly after: Snapshot;
  readonly remaining: Remaining;
  /** Errors the dispatcher processes reported. */
  readonly errors: string;
}

/** How often the end of a drain is polled (each poll counts the pending rows). */
const DRAIN_POLL_MS = 20;

export async function drain(
  context: RunContext,
  contender: Contender,
  schema: string,
  settings: DispatcherSettings,
  dispatchers: number,
  total: number,
  handler: HandlerPlan,
): Promise<Drained> {
  const init = { contender: contender.name, url: context.url, schema, poolSize: settings.poolSize, settings, handler };
  const children = Array.from({ length: dispatchers }, (_, slot) => startDispatcher(init, slot, dispatchers));
  let stopPerf = async () => {};
  try {
    await Promise.all(children.map((c) => c.next('ready')));
    const before = await snapshot(context.admin, schema);
    stopPerf = await startPerfRecord(context.log);
    const go = machineNow();
    for (const c of children) c.send({ type: 'go' });
    const deadline = Date.now() + context.timeoutMs;
    let timedOut = false;
    while (children.reduce((sum, c) => sum + c.handled, 0) < total) {
      if (Date.now() > deadline) {
        timedOut = true;
        break;
      }
      await sleep(50);
    }
    // Let the last completions commit (bounded), then stop gracefully. When nothing is pending any more is the end of
    // the run's work as the database sees it (`drainedAt`): a library that fetches far ahead starts its last handlers
    // well before it has completed them.
    const drainDeadline = Date.now() + 10_000;
    let drainedAt: number | undefined;
    while (!timedOut && Date.now() < drainDeadline) {
      if ((await contender.remaining(context.admin, schema)).pending === 0) {
        drainedAt = machineNow();
        break;
      }
      await sleep(DRAIN_POLL_MS);
    }
    await stopPerf();
    const results = Promise.all(children.map((c) => c.next<DispatcherResult>('result')));
    for (const c of children) c.send({ type: 'stop' });
    const out = await results;
    await Promise.all(children.map((c) => c.exited()));
    await sleep(300);
    const after = await snapshot(context.admin, schema);
    const remaining = await contender.remaining(context.admin, schema);
    const errors = out
      .map((o) => o.error)
      .filter(Boolean)
      .join('\n');
    return {
      go,
      drainedAt,
      out,
      records: mergeRecords(out.map((o) => o.records)),
      timedOut,
      before,
      after,
      remaining,
      errors,
    };
  } finally {
    // A drain that failed still stops perf, or it would record on.
    await stopPerf();
    children.forEach((c) => c.kill());
  }
}
