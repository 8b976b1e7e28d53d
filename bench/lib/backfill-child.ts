/**
 * A dispatcher or a paced publisher process of the backfill benchmark (bench/backfill.ts), forked with
 * `node --import tsx`; relaybus runs from dist/ as in the other cells (bench/README.md, "relaybus runs from dist/").
 * Its handlers are `h1` and `indexer` (bench/lib/types.ts's pair is h1/h2), so it is a process of its own, with the
 * protocol of bench/child.ts:
 *
 *   parent -> { type: 'init', ... }   child: builds its bus, opens its pool, then { type: 'ready' }
 *   parent -> { type: 'go', ... }     publisher: publishes, replies { type: 'result', ... }, exits
 *                                     dispatcher: starts, sends { type: 'progress', handled } every 100 ms
 *   parent -> { type: 'stop' }        dispatcher: stops gracefully, replies { type: 'result', ... }, exits
 */
import { appendFileSync } from 'node:fs';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import pg from 'pg';
import type * as Api from '../../src/index.js';
import {
  type BackfillDispatcherResult,
  type BackfillInit,
  type BackfillPublisherResult,
  type BackfillPublishPlan,
  backfillBus,
  keyOfEvent,
  TUNED,
} from './backfill-bus.js';
import { inTransaction, warmPool } from './db.js';
import { Recorder, machineNow } from './recorder.js';

const send = (message: unknown): Promise<void> => new Promise((resolve) => process.send!(message, () => resolve()));

async function runPublisher(init: BackfillInit): Promise<void> {
  const pool = new pg.Pool({ connectionString: init.url, max: 1 });
  const { bus, Event } = await backfillBus(pool, init.schema, init.handlers, () => {});
  await send({ type: 'ready' });
  const plan = (await nextMessage<{ type: 'go'; plan: BackfillPublishPlan }>('go')).plan;
  const commitI: number[] = [];
  const commitT: number[] = [];
  let error: string | undefined;
  const startedAt = machineNow();
  const interval = 1000 / plan.ratePerSec;
  try {
    for (let n = 0; ; n += 1) {
      const due = startedAt + n * interval;
      if (due >= startedAt + plan.durationMs) break;
      const wait = due - machineNow();
      if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
      const i = plan.firstI + n;
      await inTransaction(pool, (client) => bus.publish(client, Event, { i }, { key: keyOfEvent(i, plan.keys) }));
      commitT.push(machineNow());
      commitI.push(i);
    }
  } catch (e) {
    error = (e as Error).stack ?? String(e);
  }
  const endedAt = machineNow();
  await pool.end();
  const result: BackfillPublisherResult = {
    type: 'result',
    commitI: Int32Array.from(commitI),
    commitT: Float64Array.from(commitT),
    startedAt,
    endedAt,
    ...(error ? { error } : {}),
  };
  await send(result);
}

async function runDispatcher(init: BackfillInit): Promise<void> {
  const pool = new pg.Pool({ connectionString: init.url, max: TUNED.poolSize });
  const recorder = new Recorder();
  const warnings: string[] = [];
  const report = (level: string) => (message: string, fields?: Api.LogFields) => {
    const line = `${level}: ${message}${fields ? ` ${JSON.stringify(fields)}` : ''}`.slice(0, 500);
    if (warnings.length < 20) warnings.push(line);
    if (warnings.length <= 5) console.error(`[backfill dispatcher ${process.pid}] ${line}`);
  };
  const noop = () => {};
  const { bus } = await backfillBus(
    pool,
    init.schema,
    init.handlers,
    (i, h) => {
      const t = machineNow();
      recorder.add(i, h, t, t);
    },
    {
      debug:
        process.env.BENCH_CLAIM_LOG === undefined
          ? noop
          : (message: string, fields?: Record<string, unknown>) => {
              if (message === 'claimed deliveries')
                appendFileSync(process.env.BENCH_CLAIM_LOG!, `${Date.now()} ${JSON.stringify(fields)}\n`);
            },
      info: noop,
      warn: report('warn'),
      error: report('error'),
    },
  );
  await warmPool(pool, TUNED.poolSize);
  await send({ type: 'ready' });
  await nextMessage('go');
  const cpuAtGo = process.cpuUsage();
  const loopDelay = process.env.BENCH_LOOP_DELAY ? monitorEventLoopDelay({ resolution: 1 }) : undefined;
  loopDelay?.enable();
  let error: string | undefined;
  let reported = -1;
  const progress = setInterval(() => {
    if (recorder.length !== reported) {
      reported = recorder.length;
      process.send!({ type: 'progress', handled: reported });
    }
  }, 100);
  try {
    await bus.start();
  } catch (e) {
    error = (e as Error).stack ?? String(e);
  }
  await nextMessage('stop');
  const cpu = process.cpuUsage(cpuAtGo);
  clearInterval(progress);
  if (loopDelay) {
    loopDelay.disable();
    const ms = (ns: number) => (ns / 1e6).toFixed(1);
    console.log(
      `[backfill dispatcher] event loop delay ms: p50 ${ms(loopDelay.percentile(50))} p90 ${ms(loopDelay.percentile(90))} p99 ${ms(loopDelay.percentile(99))} max ${ms(loopDelay.max)} (${loopDelay.count} samples)`,
    );
  }
  try {
    await bus.stop({ graceMs: 5_000 });
  } catch (e) {
    error = (error ? `${error}\n` : '') + ((e as Error).stack ?? String(e));
  }
  await pool.end();
  const { i, h, t } = recorder.take();
  const result: BackfillDispatcherResult = {
    type: 'result',
    records: { i, h, t },
    cpuMs: (cpu.user + cpu.system) / 1000,
    warnings,
    ...(error ? { error } : {}),
  };
  await send(result);
}

const queue: { type: string }[] = [];
const waiters: { type: string; resolve: (message: never) => void }[] = [];

function nextMessage<T extends { type: string }>(type: string): Promise<T> {
  const index = queue.findIndex((m) => m.type === type);
  if (index >= 0) return Promise.resolve(queue.splice(index, 1)[0] as T);
  return new Promise<T>((resolve) => waiters.push({ type, resolve: resolve as (message: never) => void }));
}

process.on('message', (message: { type: string }) => {
  const index = waiters.findIndex((w) => w.type === message.type);
  if (index >= 0) waiters.splice(index, 1)[0]!.resolve(message as never);
  else queue.push(message);
});
process.on('disconnect', () => process.exit(0));
const init = await nextMessage<BackfillInit>('init');
try {
  if (init.role === 'publisher') await runPublisher(init);
  else await runDispatcher(init);
  process.disconnect();
} catch (e) {
  console.error(`[backfill child ${init.role}]`, e);
  process.exit(1);
}
