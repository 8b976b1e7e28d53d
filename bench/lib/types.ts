/**
 * Shared shapes of the benchmark harness. A contender is one queue design (relaybus, the 0.1.0
 * row-lease baseline, pg-boss, graphile-worker, the raw-SQL floor); a variant is a contender with
 * one set of dispatcher settings ("defaults", "tuned", "best", sweep points). A run also says
 * whether its events carry ordering keys ("keyed") or not ("unkeyed"). Every publisher and every
 * dispatcher runs in its own Node process (bench/child.ts); the orchestrator (bench/run.ts) only
 * sets up schemas, sends "go", collects the records and reads the database's statistics.
 */
import type pg from 'pg';

/** The two handlers every event fans out to (one delivery, or job, per handler). */
export const HANDLERS = ['h1', 'h2'] as const;

/** One event: its index `i` (also its payload) and its ordering key (null: unkeyed). */
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
  /**
   * Contender-specific extras: pg-boss `workers` per queue; graphile-worker `localQueue` size,
   * `completeJobBatchDelay`; raw-sql `loops`; relaybus `completionBatchWindowMs`.
   */
  readonly extra?: Readonly<Record<string, number>>;
}

/**
 * What a contender's handler calls for every attempt of delivery (event i, handler h). It records
 * the start (and the end, when the returned promise settles or at once when nothing is returned)
 * and throws when the run asks this attempt to fail (liveness cell): the contender must let the
 * throw (or rejection) reach its library, as a user's failing handler would.
 */
export type OnHandle = (i: number, handler: number) => void | Promise<void>;

/** What the child gives a contender's dispatcher besides the handler hook. */
export interface DispatcherHooks {
  readonly onHandle: OnHandle;
  /** Library warnings and errors (their loggers): printed and kept in the run record. */
  readonly warn: (message: string) => void;
  /** Backoff after a failed attempt, where the contender can set it (liveness cell); undefined: the library's. */
  readonly retryBackoffMs?: number;
  /**
   * The contender reports when its library made a failed attempt due again (epoch ms, the bench's clock), where the
   * library says (relaybus: the `failed` event's retryAt): the liveness cell's "due -> retry start".
   */
  readonly retryDue?: (i: number, handler: number, dueAtMs: number) => void;
}

export interface PublisherHandle {
  /** Publish `events` in one caller transaction (BEGIN, publish, COMMIT). */
  publish(events: readonly EventSpec[]): Promise<void>;
  close(): Promise<void>;
}

export interface DispatcherHandle {
  /**
   * The library's own start-up, before "go" (never timed): pool opened to its size, schema or
   * migration checks, anything that does not claim work. Optional: nothing to do.
   */
  prepare?(): Promise<void>;
  /** Start claiming and running handlers (after "go": timed). */
  start(): Promise<void>;
  /** Stop gracefully (flush completions, hand back leases). */
  stop(): Promise<void>;
}

export interface ChildContext {
  readonly url: string;
  readonly schema: string;
  /** Connections of the publisher pool. */
  readonly poolSize: number;
  /**
   * Publishers: the entry's variant, which publish path to measure (undefined: the contender's
   * ordinary one, as the preloads of the other scenarios use). Contenders with one path ignore it.
   */
  readonly variant?: string;
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

/** Stored pending deliveries as (event index, handler index) pairs. */
export interface StoredPairs {
  readonly i: Int32Array;
  readonly h: Uint8Array;
}

export interface Contender {
  /** Family name: relaybus, row-lease, pg-boss, graphile-worker, raw-sql. */
  readonly name: string;
  /**
   * Whether keyed events are delivered in per-(handler, key) order, one at a time (validated only
   * when true and the run is keyed). graphile-worker: a named queue per (key, handler).
   */
  readonly ordersKeys: boolean;
  /** Whether it can publish keyed events at all (pg-boss and raw-sql ignore keys: no keyed runs). */
  readonly keyed: boolean;
  /** Whether the liveness cell's per-attempt backoff (DispatcherHooks.retryBackoffMs) is honoured. */
  readonly retryBackoff: boolean;
  /** The variants it runs in the dispatch and mixed scenarios. */
  readonly variants: Readonly<Record<string, DispatcherSettings>>;
  /** Settings swept by bench:full to find `best` (peers only); ad hoc runs include them with --sweep or by --variants name. */
  readonly sweep?: Readonly<Record<string, DispatcherSettings>>;
  /** Variants an ad hoc run includes only when --variants names them (demonstrations, not contenders at their best). */
  readonly namedOnly?: readonly string[];
  /** Variants whose natural workload is keyed (ad hoc runs; plans name keyed or not per entry). */
  readonly keyedVariants: readonly string[];
  /**
   * Create the contender's objects in `schema` (the orchestrator, before a run, untimed). `variant`:
   * the entry's variant, for a publish path that needs objects of its own (relaybus records its
   * subscriptions for the 'subscriptions' and 'sql' publish variants); ignored by the others.
   */
  setup(url: string, schema: string, variant?: string): Promise<void>;
  /** Drop everything it created (the orchestrator, after a run). */
  teardown(admin: pg.Client, schema: string): Promise<void>;
  /**
   * Tables whose `pg_stat_user_tables` counters are reported (unqualified names in `schema`); a
   * pattern sums every matching table (pg-boss 10 keeps one partition of `job` per queue).
   */
  readonly tables: { readonly deliveries: string | RegExp; readonly lanes?: string };
  remaining(admin: pg.Client, schema: string): Promise<Remaining>;
  /** Every pending delivery (job, row) stored, as (event index, handler index): the publish scenario's id check. */
  stored(admin: pg.Client, schema: string): Promise<StoredPairs>;
  /** In a child process. */
  publisher(context: ChildContext): Promise<PublisherHandle>;
  /** In a child process. */
  dispatcher(context: ChildContext, settings: DispatcherSettings, hooks: DispatcherHooks): Promise<DispatcherHandle>;
}

/** The ordering key of event n of publisher p (of P): a key belongs to one publisher, so its publish order is known. */
export function keyOf(n: number, publisher: number, publishers: number, keysPerPublisher: number): string {
  return `k${(n % keysPerPublisher) * publishers + publisher}`;
}

/** Event index of the n-th event of publisher p (of P). Increasing in n for a fixed p. */
export function indexOf(n: number, publisher: number, publishers: number): number {
  return n * publishers + publisher;
}

/** A variant's settings, from `variants` or `sweep`. */
export function settingsOf(contender: Contender, variant: string): DispatcherSettings | undefined {
  return contender.variants[variant] ?? contender.sweep?.[variant];
}

/** Handler index of a handler name (h1 -> 0, h2 -> 1), -1 when unknown. */
export function handlerIndex(name: string): number {
  return (HANDLERS as readonly string[]).indexOf(name);
}

/** Turn rows of (event index, handler name) into stored pairs. */
export function pairsOf(rows: readonly { i: number | string; handler: string }[]): StoredPairs {
  const i = new Int32Array(rows.length);
  const h = new Uint8Array(rows.length);
  rows.forEach((row, r) => {
    const k = handlerIndex(row.handler);
    i[r] = Number(row.i);
    h[r] = k < 0 ? 255 : k; // 255: a handler the workload never published (reported as unexpected)
  });
  return { i, h };
}
