/**
 * One publisher or one dispatcher process (forked by the orchestrator with `node --import tsx`; the
 * contenders' libraries are compiled JavaScript: relaybus from dist/, the peers from node_modules).
 *
 * Protocol (IPC, advanced serialization so typed arrays travel as they are):
 *   parent -> { type: 'init', ... }     child: loads its code, opens its pool and runs the library's
 *                                       own start-up (DispatcherHandle.prepare), then { type: 'ready' }
 *   parent -> { type: 'go', plan }      publisher: publishes the plan, replies { type: 'result', ... }, exits
 *                                       dispatcher: starts, sends { type: 'progress', handled } every 100 ms
 *   parent -> { type: 'stop' }          dispatcher: stops gracefully, replies { type: 'result', ... }, exits
 */
import { loadContender } from './contenders/index.js';
import { installStatementCounter, resetStatementStats, statementStats } from './lib/instrument.js';
import { makeHook } from './lib/hook.js';
import { keyString, type KeyMap } from './lib/keys.js';
import { CpuTrace } from './lib/cpu-trace.js';
import { machineNow, Recorder, wallClockOffset } from './lib/recorder.js';
import { indexOf, keyOf, type DispatcherSettings, type EventSpec } from './lib/types.js';

installStatementCounter();

/** How the no-op handler behaves in a run. */
export interface HandlerPlan {
  /** 'noop': record the start and return; 'yield': also wait one event-loop turn (setImmediate), so overlaps can be seen. */
  readonly mode: 'noop' | 'yield';
  /** Events whose first attempt (per handler, in this process) throws: the liveness cell's failing heads. */
  readonly failFirst?: Int32Array;
  /** Backoff after a failed attempt (contenders that can set it). */
  readonly retryBackoffMs?: number;
  /** Keys of the events, for the in-process "running" marker per (handler, key). */
  readonly keys: KeyMap;
}

export interface InitMessage {
  readonly type: 'init';
  readonly role: 'publisher' | 'dispatcher';
  readonly contender: string;
  readonly url: string;
  readonly schema: string;
  readonly poolSize: number;
  /** Publishers: the publish path to measure (ChildContext.variant); absent: the contender's ordinary one. */
  readonly variant?: string;
  readonly settings?: DispatcherSettings;
  readonly handler?: HandlerPlan;
}

/** What a publisher publishes after "go". Events of publisher p: n = start, start+1, ...; i = n * P + p. */
export interface PublishPlan {
  readonly publisher: number;
  readonly publishers: number;
  readonly keysPerPublisher: number;
  /** false: events carry no ordering key. */
  readonly keyed: boolean;
  readonly batch: number;
  /**
   * 'count': exactly `count` events as fast as possible; 'window': as many as fit in `durationMs`;
   * 'rate': `ratePerSec` paced, one event per transaction, for `durationMs`; 'list': the events of
   * `list` (event i = position, key number per event, -1 unkeyed) in batches of `batch`.
   */
  readonly kind: 'count' | 'window' | 'rate' | 'list';
  readonly count?: number;
  readonly durationMs?: number;
  readonly ratePerSec?: number;
  readonly list?: Int32Array;
  /** 'list': the first position published (default 0). */
  readonly from?: number;
}

export interface PublisherResult {
  readonly type: 'result';
  readonly published: number;
  /** Event indexes committed, in commit order. */
  readonly committed: Int32Array;
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
  /** Successful attempts: event, handler, handler start and end. */
  readonly records: { i: Int32Array; h: Uint8Array; t: Float64Array; e: Float64Array };
  /** Planned failed attempts (liveness): event, handler, time of the throw. */
  readonly failures: { i: Int32Array; h: Uint8Array; t: Float64Array };
  /** When the library made those attempts due again, where the contender reports it (DispatcherHooks.retryDue). */
  readonly retryDues: { i: Int32Array; h: Uint8Array; t: Float64Array };
  /** Starts of a (handler, key) while another delivery of it was running in this process. */
  readonly overlaps: number;
  readonly statements: Record<string, { count: number; ms: number }>;
  /** CPU time (user + system) of the dispatcher process from "go" to "stop". */
  readonly cpuMs: number;
  /** Library warnings and errors (first 20) and their count. */
  readonly warnings: readonly string[];
  readonly warningCount: number;
  readonly error?: string;
}

const send = (message: unknown): Promise<void> => new Promise((resolve) => process.send!(message, () => resolve()));

async function runPublisher(init: InitMessage): Promise<void> {
  const impl = await loadContender(init.contender);
  const handle = await impl.publisher({
    url: init.url,
    schema: init.schema,
    poolSize: init.poolSize,
    ...(init.variant !== undefined ? { variant: init.variant } : {}),
  });
  await send({ type: 'ready' });
  const plan = await nextMessage<{ type: 'go'; plan: PublishPlan }>('go').then((m) => m.plan);
  resetStatementStats();
  const calls: number[] = [];
  const committed: number[] = [];
  const commitI: number[] = [];
  const commitT: number[] = [];
  let n = 0;
  let error: string | undefined;
  const startedAt = machineNow();
  const spec = (k: number): EventSpec => {
    if (plan.kind === 'list') {
      const key = plan.list![k]!;
      return { i: k, key: key < 0 ? null : keyString(key) };
    }
    return {
      i: indexOf(k, plan.publisher, plan.publishers),
      key: plan.keyed ? keyOf(k, plan.publisher, plan.publishers, plan.keysPerPublisher) : null,
    };
  };
  try {
    if (plan.kind === 'rate') {
      const interval = 1000 / plan.ratePerSec!;
      const end = startedAt + plan.durationMs!;
      for (;;) {
        const due = startedAt + n * interval;
        if (due >= end) break;
        const wait = due - machineNow();
        if (wait > 1) await new Promise((resolve) => setTimeout(resolve, wait));
        const event = spec(n);
        const t0 = machineNow();
        await handle.publish([event]);
        const t1 = machineNow();
        calls.push(t1 - t0);
        committed.push(event.i);
        commitI.push(event.i);
        commitT.push(t1);
        n += 1;
      }
    } else {
      const end = plan.kind === 'window' ? startedAt + plan.durationMs! : Infinity;
      const total =
        plan.kind === 'count' ? plan.count! : plan.kind === 'list' ? plan.list!.length - (plan.from ?? 0) : Infinity;
      const first = plan.kind === 'list' ? (plan.from ?? 0) : 0;
      while (n < total && machineNow() < end) {
        const size = Math.min(plan.batch, total - n);
        const events = Array.from({ length: size }, (_, k) => spec(first + n + k));
        const t0 = machineNow();
        await handle.publish(events);
        calls.push(machineNow() - t0);
        for (const event of events) committed.push(event.i);
        n += size;
      }
    }
  } catch (e) {
    error = (e as Error).stack ?? String(e);
  }
  const endedAt = machineNow();
  const statements = statementStats();
  await handle.close();
  const result: PublisherResult = {
    type: 'result',
    published: n,
    committed: Int32Array.from(committed),
    calls: Float64Array.from(calls),
    commitI: Int32Array.from(commitI),
    commitT: Float64Array.from(commitT),
    startedAt,
    endedAt,
    statements,
    ...(error ? { error } : {}),
  };
  await send(result);
}

async function runDispatcher(init: InitMessage): Promise<void> {
  const impl = await loadContender(init.contender);
  const recorder = new Recorder();
  const failures = new Recorder();
  const dues = new Recorder();
  const state = { overlaps: 0 };
  const warnings: string[] = [];
  let warningCount = 0;
  const warn = (message: string) => {
    warningCount += 1;
    if (warnings.length < 20) warnings.push(message.slice(0, 500));
    if (warningCount <= 5)
      console.error(`[bench ${init.contender} dispatcher ${process.pid}] ${message.slice(0, 500)}`);
  };
  const plan = init.handler ?? { mode: 'noop', keys: { kind: 'none' } };
  const handle = await impl.dispatcher(
    { url: init.url, schema: init.schema, poolSize: init.poolSize },
    init.settings!,
    {
      onHandle: makeHook(plan, recorder, failures, state),
      warn,
      ...(plan.retryBackoffMs !== undefined
        ? {
            retryBackoffMs: plan.retryBackoffMs,
            // `at` is the library's wall-clock time; the starts it is set beside are on the machine's clock.
            retryDue: (i, h, at) => {
              const due = at - wallClockOffset();
              dues.add(i, h, due, due);
            },
          }
        : {}),
    },
  );
  await handle.prepare?.();
  await send({ type: 'ready' });
  await nextMessage('go');
  resetStatementStats();
  const cpuAtGo = process.cpuUsage();
  let error: string | undefined;
  let reported = -1;
  const cpuTrace = process.env.BENCH_CPU_TRACE === '1' ? new CpuTrace(cpuAtGo) : undefined;
  const progress = setInterval(() => {
    cpuTrace?.sample(recorder.length);
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
  if (cpuTrace !== undefined)
    console.error(cpuTrace.report(recorder.length, `${init.contender} dispatcher ${process.pid}`));
  try {
    await handle.stop();
  } catch (e) {
    error = (error ? error + '\n' : '') + ((e as Error).stack ?? String(e));
  }
  const failed = failures.take();
  const result: DispatcherResult = {
    type: 'result',
    records: recorder.take(),
    failures: { i: failed.i, h: failed.h, t: failed.t },
    retryDues: (({ i, h, t }) => ({ i, h, t }))(dues.take()),
    overlaps: state.overlaps,
    statements: statementStats(),
    cpuMs: (cpu.user + cpu.system) / 1000,
    warnings,
    warningCount,
    ...(error ? { error } : {}),
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
