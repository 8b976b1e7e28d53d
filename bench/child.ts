/**
 * One publisher or one dispatcher process (forked by the orchestrator with `node --import tsx`).
 *
 * Protocol (IPC, advanced serialization so typed arrays travel as they are):
 *   parent -> { type: 'init', ... }     child -> { type: 'ready' }
 *   parent -> { type: 'go', plan }      publisher: publishes the plan, replies { type: 'result', ... }, exits
 *                                       dispatcher: starts, sends { type: 'progress', handled } every 100 ms
 *   parent -> { type: 'stop' }          dispatcher: stops gracefully, replies { type: 'result', ... }, exits
 */
import { loadContender } from './contenders/index.js';
import { installStatementCounter, resetStatementStats, statementStats } from './lib/instrument.js';
import { Recorder, wallNow } from './lib/recorder.js';
import { indexOf, keyOf, type DispatcherSettings, type EventSpec } from './lib/types.js';

installStatementCounter();

export interface InitMessage {
  readonly type: 'init';
  readonly role: 'publisher' | 'dispatcher';
  readonly contender: string;
  readonly url: string;
  readonly schema: string;
  readonly poolSize: number;
  readonly settings?: DispatcherSettings;
}

/** What a publisher publishes after "go". Events of publisher p: n = start, start+1, ...; i = n * P + p. */
export interface PublishPlan {
  readonly publisher: number;
  readonly publishers: number;
  readonly keysPerPublisher: number;
  readonly batch: number;
  /** 'count': exactly `count` events as fast as possible; 'window': as many as fit in `durationMs`; 'rate': `ratePerSec` paced, one event per transaction, for `durationMs`. */
  readonly kind: 'count' | 'window' | 'rate';
  readonly count?: number;
  readonly durationMs?: number;
  readonly ratePerSec?: number;
}

export interface PublisherResult {
  readonly type: 'result';
  readonly published: number;
  readonly calls: Float64Array;
  readonly commitI: Int32Array;
  readonly commitT: Float64Array;
  readonly startedAt: number;
  readonly endedAt: number;
  readonly statements: Record<string, { count: number; ms: number }>;
  readonly error?: string;
}

export interface DispatcherResult {
  readonly type: 'result';
  readonly records: { i: Int32Array; h: Uint8Array; t: Float64Array };
  readonly statements: Record<string, { count: number; ms: number }>;
  /** CPU time (user + system) of the dispatcher process from "go" to "stop". */
  readonly cpuMs: number;
  readonly error?: string;
}

const send = (message: unknown): Promise<void> => new Promise((resolve) => process.send!(message, () => resolve()));

async function runPublisher(init: InitMessage): Promise<void> {
  const impl = await loadContender(init.contender);
  const handle = await impl.publisher({ url: init.url, schema: init.schema, poolSize: init.poolSize });
  await send({ type: 'ready' });
  const plan = await nextMessage<{ type: 'go'; plan: PublishPlan }>('go').then((m) => m.plan);
  resetStatementStats();
  const calls: number[] = [];
  const commitI: number[] = [];
  const commitT: number[] = [];
  let n = 0;
  let error: string | undefined;
  const startedAt = wallNow();
  const spec = (k: number): EventSpec => ({ i: indexOf(k, plan.publisher, plan.publishers), key: keyOf(k, plan.publisher, plan.publishers, plan.keysPerPublisher) });
  try {
    if (plan.kind === 'rate') {
      const interval = 1000 / plan.ratePerSec!;
      const end = startedAt + plan.durationMs!;
      for (;;) {
        const due = startedAt + n * interval;
        if (due >= end) break;
        const wait = due - wallNow();
        if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
        const event = spec(n);
        const t0 = wallNow();
        await handle.publish([event]);
        const t1 = wallNow();
        calls.push(t1 - t0);
        commitI.push(event.i);
        commitT.push(t1);
        n += 1;
      }
    } else {
      const end = plan.kind === 'window' ? startedAt + plan.durationMs! : Infinity;
      const total = plan.kind === 'count' ? plan.count! : Infinity;
      while (n < total && wallNow() < end) {
        const size = Math.min(plan.batch, total - n);
        const events = Array.from({ length: size }, (_, k) => spec(n + k));
        const t0 = wallNow();
        await handle.publish(events);
        calls.push(wallNow() - t0);
        n += size;
      }
    }
  } catch (e) {
    error = (e as Error).stack ?? String(e);
  }
  const endedAt = wallNow();
  const statements = statementStats();
  await handle.close();
  const result: PublisherResult = {
    type: 'result', published: n, calls: Float64Array.from(calls), commitI: Int32Array.from(commitI), commitT: Float64Array.from(commitT),
    startedAt, endedAt, statements, ...(error ? { error } : {}),
  };
  await send(result);
}

async function runDispatcher(init: InitMessage): Promise<void> {
  const impl = await loadContender(init.contender);
  const recorder = new Recorder();
  const handle = await impl.dispatcher({ url: init.url, schema: init.schema, poolSize: init.poolSize }, init.settings!, (i, h) => recorder.add(i, h, wallNow()));
  await send({ type: 'ready' });
  await nextMessage('go');
  resetStatementStats();
  const cpuAtGo = process.cpuUsage();
  let error: string | undefined;
  let reported = -1;
  const progress = setInterval(() => {
    if (recorder.length !== reported) {
      reported = recorder.length;
      process.send!({ type: 'progress', handled: reported });
    }
  }, 100);
  try {
    await handle.start();
  } catch (e) {
    error = (e as Error).stack ?? String(e);
  }
  await nextMessage('stop');
  const cpu = process.cpuUsage(cpuAtGo);
  clearInterval(progress);
  try {
    await handle.stop();
  } catch (e) {
    error = (error ? error + '\n' : '') + ((e as Error).stack ?? String(e));
  }
  const result: DispatcherResult = {
    type: 'result', records: recorder.take(), statements: statementStats(), cpuMs: (cpu.user + cpu.system) / 1000, ...(error ? { error } : {}),
  };
  await send(result);
}

const queue: { type: string }[] = [];
const waiters: { type: string; resolve: (message: never) => void }[] = [];
process.on('message', (message: { type: string }) => {
  const index = waiters.findIndex((w) => w.type === message.type);
  if (index >= 0) waiters.splice(index, 1)[0]!.resolve(message as never);
  else queue.push(message);
});

function nextMessage<T extends { type: string }>(type: string): Promise<T> {
  const index = queue.findIndex((m) => m.type === type);
  if (index >= 0) return Promise.resolve(queue.splice(index, 1)[0] as T);
  return new Promise<T>((resolve) => waiters.push({ type, resolve: resolve as (message: never) => void }));
}

process.on('disconnect', () => process.exit(0));

const init = await nextMessage<InitMessage>('init');
try {
  if (init.role === 'publisher') await runPublisher(init);
  else await runDispatcher(init);
  process.disconnect();
} catch (e) {
  console.error(`[bench child ${init.role} ${init.contender}]`, e);
  process.exit(1);
}
