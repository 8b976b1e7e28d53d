/**
 * Helpers of the chaos suite: the worker's config module (written like a user's: a pg.Pool from
 * DATABASE_URL with pool.on('error'), a transactional handler that bumps a counter row per event in
 * ctx.transaction, a plain handler that records every run), a fleet of real `relaybus worker`
 * processes that notices workers dying on their own, keyed publishing, and the analysis of what the
 * handlers recorded.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type pg from 'pg';
import type { PgClientLike, PostgresStore } from '../../src/postgres/index.js';
import { IMPORTS, startCli, writeModule, type RunningCli } from '../cli/support.js';

export const EVENT_TYPE = 'item.created';
/** Stored with each delivery at publish: enough that retries during an outage never dead-letter an event. */
export const MAX_ATTEMPTS = 25;
export const HANDLERS = [
  { name: 'tally', maxAttempts: MAX_ATTEMPTS },
  { name: 'record', maxAttempts: MAX_ATTEMPTS },
] as const;
export const HANDLER_NAMES = HANDLERS.map((h) => h.name);

/**
 * The config module `relaybus worker <file>` loads. Settings from the environment: DATABASE_URL,
 * CHAOS_SCHEMA (relaybus tables and the side tables), HANDLER_DELAY_MS (the plain handler's work).
 */
export function configSource(): string {
  return `
import pg from '${IMPORTS.pg}';
import { createRelayBus, defineEvent, Type } from '${IMPORTS.relaybus}';
import { fromPg, postgresStore } from '${IMPORTS.postgres}';

const schema = process.env.CHAOS_SCHEMA;
const delayMs = Number(process.env.HANDLER_DELAY_MS ?? 0);
const log = (level) => (message, fields) =>
  process.stderr.write('[chaos worker ' + process.pid + '] ' + level + ' ' + message + ' ' + JSON.stringify(fields ?? {}) + '\\n');

export const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 12, application_name: 'chaos-worker-' + process.pid });
pool.on('error', (error) => process.stderr.write('[chaos worker ' + process.pid + '] idle pool client error: ' + error.message + '\\n'));

export const ItemCreated = defineEvent('${EVENT_TYPE}', Type.Object({ n: Type.Integer({ minimum: 0 }) }));
const bus = createRelayBus({
  // Claim connections held (the path with more to lose when a backend is terminated or the server restarts); the
  // pool's path meets the same in connection-loss.test.ts and the CLI's worker-resilience tests.
  store: postgresStore({ driver: fromPg(pool), schema }),
  events: [ItemCreated],
  setupStore: false,
  maxAttempts: ${MAX_ATTEMPTS},
  backoff: { initialDelayMs: 100, maxDelayMs: 1000 },
  logger: { debug() {}, info() {}, warn: log('warn'), error: log('error') },
  dispatcher: { shutdownGraceMs: 5000 },
});

const record = 'INSERT INTO "' + schema + '".handled (handler, event_id, key, seq, n, attempt, pid, published_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)';
const values = (handler, item, d) => [handler, d.eventId, d.key, d.sequence, item.n, d.attempt, process.pid, d.createdAt];

bus.on(ItemCreated, 'tally', { transactional: true }, async (item, ctx) => {
  await ctx.transaction.query({
    text: 'INSERT INTO "' + schema + '".counters AS c (event_id, n) VALUES ($1, 1) ON CONFLICT (event_id) DO UPDATE SET n = c.n + 1',
    values: [ctx.delivery.eventId],
  });
  await ctx.transaction.query({ text: record, values: values('tally', item, ctx.delivery) });
});
bus.on(ItemCreated, 'record', async (item, ctx) => {
  if (delayMs > 0) await new Promise((resolve) => setTimeout(resolve, delayMs));
  await pool.query(record, values('record', item, ctx.delivery));
});
export default bus;
`;
}

/** The side tables the handlers write, in `schema` (next to the relaybus tables). */
export function sideTablesSql(schema: string): string {
  return `
    CREATE TABLE "${schema}".handled (
      id bigserial PRIMARY KEY,
      handler text NOT NULL,
      event_id text NOT NULL,
      key text,
      seq bigint,
      n int NOT NULL,
      attempt int NOT NULL,
      pid int NOT NULL,
      published_at timestamptz NOT NULL,
      at timestamptz NOT NULL DEFAULT clock_timestamp()
    );
    CREATE TABLE "${schema}".counters (event_id text PRIMARY KEY, n int NOT NULL);
  `;
}

/** One handler run, as recorded (times in ms since the epoch; the database and the test share the host clock). */
export interface HandledRow {
  readonly id: number;
  readonly handler: string;
  readonly eventId: string;
  readonly key: string | null;
  readonly n: number;
  readonly attempt: number;
  readonly pid: number;
  readonly publishedAt: number;
  readonly at: number;
}

export async function handledRows(pool: pg.Pool, schema: string): Promise<HandledRow[]> {
  const { rows } = await pool.query<{
    id: string;
    handler: string;
    event_id: string;
    key: string | null;
    n: number;
    attempt: number;
    pid: number;
    published_at: Date;
    at: Date;
  }>(`SELECT id, handler, event_id, key, n, attempt, pid, published_at, at FROM "${schema}".handled ORDER BY id`);
  return rows.map((r) => ({
    id: Number(r.id),
    handler: r.handler,
    eventId: r.event_id,
    key: r.key,
    n: r.n,
    attempt: r.attempt,
    pid: r.pid,
    publishedAt: r.published_at.getTime(),
    at: r.at.getTime(),
  }));
}

/** The key of the n-th published event. */
export const keyOf = (n: number, keys: number): string => `k-${n % keys}`;

/** Publish events n = from..from+count-1 (key `keyOf(n)`), `batch` per transaction; returns their ids in n order. */
export async function publishKeyed(
  store: PostgresStore<PgClientLike>,
  options: { from: number; count: number; keys: number; batch: number },
): Promise<string[]> {
  const ids: string[] = [];
  const end = options.from + options.count;
  for (let first = options.from; first < end; first += options.batch) {
    const items = Array.from({ length: Math.min(options.batch, end - first) }, (_, i) => ({
      type: EVENT_TYPE,
      key: keyOf(first + i, options.keys),
      payload: { n: first + i },
      handlers: HANDLERS,
    }));
    const results = await store.transaction((tx) => store.publish(tx, items));
    ids.push(...results.map((r) => r.eventId));
  }
  return ids;
}

/** What the recorded runs say about completeness, duplicates and per-key order. */
export interface Analysis {
  /** `handler/n` of every published event a handler never ran. */
  readonly missing: string[];
  readonly runs: Readonly<Record<string, { rows: number; distinct: number; duplicates: number }>>;
  /** Per (handler, key), in recorded order: a run of an event published before one already run. */
  readonly orderViolations: string[];
}

export function analyse(rows: readonly HandledRow[], published: number, handlers: readonly string[]): Analysis {
  const runs: Record<string, { rows: number; distinct: number; duplicates: number }> = {};
  const seen = new Map<string, Set<number>>();
  for (const handler of handlers) {
    runs[handler] = { rows: 0, distinct: 0, duplicates: 0 };
    seen.set(handler, new Set());
  }
  const orderViolations: string[] = [];
  const latest = new Map<string, HandledRow>(); // (handler, key) -> the run of the latest-published event so far
  for (const row of rows) {
    const stats = (runs[row.handler] ??= { rows: 0, distinct: 0, duplicates: 0 });
    const ns = seen.get(row.handler) ?? new Set<number>();
    seen.set(row.handler, ns);
    stats.rows += 1;
    if (ns.has(row.n)) stats.duplicates += 1;
    else {
      ns.add(row.n);
      stats.distinct += 1;
    }
    const slot = `${row.handler}/${row.key}`;
    const before = latest.get(slot);
    if (before !== undefined && row.n < before.n) {
      orderViolations.push(
        `${slot}: event n=${row.n} (pid ${row.pid}, attempt ${row.attempt}, at ${new Date(row.at).toISOString()}) ran after n=${before.n} (pid ${before.pid}, attempt ${before.attempt}, at ${new Date(before.at).toISOString()})`,
      );
    }
    if (before === undefined || row.n > before.n) latest.set(slot, row);
  }
  const missing: string[] = [];
  for (const handler of handlers) {
    const ns = seen.get(handler)!;
    for (let n = 0; n < published; n += 1) if (!ns.has(n)) missing.push(`${handler}/${n}`);
  }
  return { missing, runs, orderViolations };
}

/** The p-th percentile (0..100) of `values`, or NaN when empty. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))]!;
}

/** The last `lines` lines of `text` (without the `field: undefined,` noise of a printed pg error), indented for a report. */
export function tail(text: string, lines = 15): string {
  const useful = (line: string) =>
    line.trim() !== '' && !/^\s+\w+: undefined,$/.test(line) && !line.includes('[... lines matching');
  return text
    .split('\n')
    .filter(useful)
    .slice(-lines)
    .map((line) => `    ${line}`)
    .join('\n');
}

/** The most frequent kinds of line in `text` (digits and ids masked), for a short report of what a worker logged. */
export function summariseLog(text: string, top = 6): string[] {
  const kinds = new Map<string, number>();
  for (const line of text.split('\n')) {
    if (line.trim() === '') continue;
    const kind = line
      .replace(/[0-9a-f]{12,}/g, '<id>')
      .replace(/\d+/g, '#')
      .slice(0, 180);
    kinds.set(kind, (kinds.get(kind) ?? 0) + 1);
  }
  return [...kinds]
    .sort((a, b) => b[1] - a[1])
    .slice(0, top)
    .map(([kind, n]) => `${n}x ${kind}`);
}

/** A `relaybus worker` process of the fleet. */
export interface Worker {
  readonly label: string;
  readonly cli: RunningCli;
  readonly pid: number;
  readonly startedAt: number;
  /** True once the test killed it on purpose. */
  killedByTest: boolean;
}

export const isAlive = (worker: Worker): boolean =>
  worker.cli.child.exitCode === null && worker.cli.child.signalCode === null;

/** A worker that exited without the test asking it to. */
export interface UnexpectedExit {
  readonly label: string;
  readonly pid: number;
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  /** What the test was doing when it noticed. */
  readonly during: string;
  readonly stderr: string;
  readonly stdout: string;
}

const everyChild = new Set<Worker>();
process.on('exit', () => {
  for (const worker of everyChild) if (isAlive(worker)) worker.cli.child.kill('SIGKILL');
});

/**
 * Real `relaybus worker <config> <flags>` processes. `supervise()` notices a worker that exited on
 * its own, records it (a failure of the suite) and starts a replacement, as an orchestrator would,
 * so the rest of the scenario still runs and its other guarantees are still checked.
 */
export class Fleet {
  readonly workers: Worker[] = [];
  readonly exits: UnexpectedExit[] = [];
  readonly #dir: string;
  readonly #config: string;
  readonly #flags: readonly string[];
  readonly #env: Readonly<Record<string, string | undefined>>;
  #replacements = 0;

  constructor(options: { dir: string; flags: readonly string[]; env: Readonly<Record<string, string | undefined>> }) {
    this.#dir = options.dir;
    this.#config = writeModule(options.dir, 'chaos-bus.mjs', configSource());
    this.#flags = options.flags;
    this.#env = { ...options.env, NODE_TEST_CONTEXT: undefined };
  }

  start(label: string): Worker {
    const cli = startCli(['worker', this.#config, ...this.#flags], {
      cwd: this.#dir,
      env: this.#env,
      timeoutMs: 900_000,
    });
    const worker: Worker = { label, cli, pid: cli.child.pid ?? -1, startedAt: Date.now(), killedByTest: false };
    this.workers.push(worker);
    everyChild.add(worker);
    return worker;
  }

  /** Resolves once the worker printed its "running" line. */
  ready(worker: Worker, timeoutMs = 30_000): Promise<void> {
    return worker.cli.waitFor(/relaybus worker: running/, timeoutMs);
  }

  /** The owner id the worker printed, if it did. */
  ownerOf(worker: Worker): string | undefined {
    return /as owner (\S+)/.exec(worker.cli.output().stdout)?.[1];
  }

  alive(): Worker[] {
    return this.workers.filter(isAlive);
  }

  /** Record every worker that exited on its own since the last call and start a replacement for it. */
  supervise(during: string): UnexpectedExit[] {
    const found: UnexpectedExit[] = [];
    for (const worker of this.workers) {
      if (isAlive(worker) || worker.killedByTest || this.exits.some((e) => e.pid === worker.pid)) continue;
      const { stdout, stderr } = worker.cli.output();
      const exit: UnexpectedExit = {
        label: worker.label,
        pid: worker.pid,
        code: worker.cli.child.exitCode,
        signal: worker.cli.child.signalCode,
        during,
        stderr,
        stdout,
      };
      this.exits.push(exit);
      found.push(exit);
    }
    for (const exit of found) {
      this.#replacements += 1;
      this.start(`${exit.label}-replacement${this.#replacements}`);
    }
    return found;
  }

  /** SIGKILL `worker` (the test's own fault). */
  async kill9(worker: Worker): Promise<void> {
    worker.killedByTest = true;
    worker.cli.child.kill('SIGKILL');
    await worker.cli.exited;
  }

  /** SIGTERM every live worker; SIGKILL what is left after `graceMs`. Returns each worker's exit. */
  async stopAll(
    graceMs = 15_000,
  ): Promise<{ label: string; code: number | null; signal: NodeJS.Signals | null; ms: number }[]> {
    const live = this.alive();
    const began = Date.now();
    for (const worker of live) {
      worker.killedByTest = true;
      worker.cli.child.kill('SIGTERM');
    }
    return Promise.all(
      live.map(async (worker) => {
        const timer = setTimeout(() => worker.cli.child.kill('SIGKILL'), graceMs);
        const result = await worker.cli.exited;
        clearTimeout(timer);
        everyChild.delete(worker);
        return { label: worker.label, code: result.code, signal: result.signal, ms: Date.now() - began };
      }),
    );
  }
}

/** Run `query` until it works (the test's own reads ride out the outages it causes), for up to `timeoutMs`. */
export async function retrying<T>(query: () => Promise<T>, timeoutMs = 30_000): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await query();
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await sleep(100);
    }
  }
}
