/**
 * Shared shapes of the benchmark harness. A contender is one queue design (relaybus, the 0.1.0
 * row-lease baseline, pg-boss, graphile-worker, the raw-SQL floor); a variant is a contender with
 * one set of dispatcher settings ("defaults", "tuned"). Every publisher and every dispatcher runs in
 * its own Node process (bench/child.ts); the orchestrator (bench/run.ts) only sets up schemas,
 * sends "go", collects the records and reads the database's statistics.
 */
import type pg from 'pg';

/** The two handlers every event fans out to (one delivery, or job, per handler). */
export const HANDLERS = ['h1', 'h2'] as const;

/** One event: its index `i` (also its payload) and its ordering key. */
export interface EventSpec {
  readonly i: number;
  readonly key: string | null;
}

/** Dispatcher settings of a variant; each contender maps them onto its own options. */
export interface DispatcherSettings {
  /** Handlers (or jobs) running at once. */
  readonly concurrency: number;
  /** Most deliveries per claim / fetch. */
  readonly batchSize: number;
  /** Idle wait between claims. */
  readonly pollIntervalMs: number;
  /** Connections of the dispatcher's pool. */
  readonly poolSize: number;
  /** Contender-specific extras (pg-boss workers per queue, graphile local queue size, raw loops). */
  readonly extra?: Readonly<Record<string, number>>;
}

/** Called by a contender's handler when it starts running delivery (event i, handler h). */
export type OnHandle = (i: number, handler: number) => void;

export interface PublisherHandle {
  /** Publish `events` in one caller transaction (BEGIN, publish, COMMIT). */
  publish(events: readonly EventSpec[]): Promise<void>;
  close(): Promise<void>;
}

export interface DispatcherHandle {
  /** Start claiming and running handlers. */
  start(): Promise<void>;
  /** Stop gracefully (flush completions, hand back leases). */
  stop(): Promise<void>;
}

export interface ChildContext {
  readonly url: string;
  readonly schema: string;
  /** Connections of the publisher pool. */
  readonly poolSize: number;
}

/** What the orchestrator asks about the state of a contender's tables after a run. */
export interface Remaining {
  /** Deliveries (jobs) not completed yet: pending, in flight, retrying. */
  readonly pending: number;
  /** Dead-lettered / permanently failed. */
  readonly dead: number;
  /** Rows the contender holds for completed deliveries (pg-boss keeps them; relaybus deletes). */
  readonly completedRows: number;
}

export interface Contender {
  /** Family name: relaybus, row-lease, pg-boss, graphile-worker, raw-sql. */
  readonly name: string;
  /** Whether it orders deliveries of one key (validated only when true). */
  readonly ordered: boolean;
  /** The variants it runs in the dispatch and mixed scenarios. */
  readonly variants: Readonly<Record<string, DispatcherSettings>>;
  /** Create the contender's objects in `schema` (the orchestrator, before a run). */
  setup(url: string, schema: string): Promise<void>;
  /** Drop everything it created (the orchestrator, after a run). */
  teardown(admin: pg.Client, schema: string): Promise<void>;
  /**
   * Tables whose `pg_stat_user_tables` counters are reported (unqualified names in `schema`); a
   * pattern sums every matching table (pg-boss 10 keeps one partition of `job` per queue).
   */
  readonly tables: { readonly deliveries: string | RegExp; readonly lanes?: string };
  remaining(admin: pg.Client, schema: string): Promise<Remaining>;
  /** In a child process. */
  publisher(context: ChildContext): Promise<PublisherHandle>;
  /** In a child process. */
  dispatcher(context: ChildContext, settings: DispatcherSettings, onHandle: OnHandle): Promise<DispatcherHandle>;
}

/** The ordering key of event n of publisher p (of P): a key belongs to one publisher, so its publish order is known. */
export function keyOf(n: number, publisher: number, publishers: number, keysPerPublisher: number): string {
  return `k${(n % keysPerPublisher) * publishers + publisher}`;
}

/** Event index of the n-th event of publisher p (of P). Increasing in n for a fixed p. */
export function indexOf(n: number, publisher: number, publishers: number): number {
  return n * publishers + publisher;
}
