import { Type, type TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { InvalidOptionsError } from './errors.js';
import { MAX_CLAIM_LOOPS, MAX_FOLLOWERS } from './limits.js';
import type { HandlerOptions } from './handlers.js';
import type { Logger } from './logger.js';
import type { BackoffOptions } from './retry-policy.js';

/**
 * Options of `createRelayBus` and of its dispatcher, their defaults (exported as `DEFAULT_*`) and
 * their validation. Options are checked once, at construction, against TypeBox schemas: a typo'd
 * or out-of-range option throws `InvalidOptionsError` naming the option, the rule and the value.
 * The resolved options are frozen.
 *
 * Two groups: handler defaults (`maxAttempts`, `backoff`, `handlerTimeoutMs`) sit at the top level
 * because publishers need `maxAttempts` too (it is stored with each delivery); the worker loop's
 * settings sit under `dispatcher`.
 */

/** Handlers running at once per bus. */
export const DEFAULT_CONCURRENCY = 10;
/** Most deliveries claimed per claim call (never more than the free handler slots). */
export const DEFAULT_BATCH_SIZE = 10;
/** How long an idle dispatcher waits before claiming again. */
export const DEFAULT_POLL_INTERVAL_MS = 1_000;
/** Lane lease; renewed every third of it while work runs. A crashed worker's lanes wait this long. */
export const DEFAULT_LEASE_DURATION_MS = 30_000;
/** Completions finishing within this window are written by one `completeMany`. */
export const DEFAULT_COMPLETION_BATCH_WINDOW_MS = 2;
/** How long `stop()` lets running handlers finish before aborting and releasing them. */
export const DEFAULT_SHUTDOWN_GRACE_MS = 10_000;
/** Attempts before a delivery is dead-lettered. */
export const DEFAULT_MAX_ATTEMPTS = 10;
/** An attempt running longer than this is aborted and counted as failed. */
export const DEFAULT_HANDLER_TIMEOUT_MS = 60_000;
/** 1 s, 2 s, 4 s, ... capped at 5 min, +-20%. */
export const DEFAULT_BACKOFF: BackoffOptions = Object.freeze({
  initialDelayMs: 1_000,
  maxDelayMs: 300_000,
  multiplier: 2,
  jitter: 0.2,
});
/** Claim loops per dispatcher (see `DispatcherOptions.claimLoops`). */
export const DEFAULT_CLAIM_LOOPS = 1;
/** Followers a claim brings with each keyed head (see `DispatcherOptions.followers`): none. */
export const DEFAULT_FOLLOWERS = 0;
/** `start()` runs `store.setup()` unless told otherwise. */
export const DEFAULT_SETUP_STORE = true;

/** Longest delay a Node timer supports (about 24.8 days). */
export const MAX_TIMER_MS = 2_147_483_647;
const DAY_MS = 86_400_000;

/** Settings of the worker loop that claims deliveries and runs their handlers. */
export interface DispatcherOptions {
  /** Handlers running at once, 1..1000. Default `DEFAULT_CONCURRENCY` (10). */
  readonly concurrency?: number;
  /** Most deliveries per claim, 1..1000. Default `DEFAULT_BATCH_SIZE` (10). */
  readonly batchSize?: number;
  /** Idle wait between claims, 1 ms..1 day. Default `DEFAULT_POLL_INTERVAL_MS` (1000). */
  readonly pollIntervalMs?: number;
  /** Lane lease, 100 ms..1 day. Default `DEFAULT_LEASE_DURATION_MS` (30 000). */
  readonly leaseDurationMs?: number;
  /**
   * Completion batching window, 0..1000 ms: completions within it are one write; one write at a time (per claim loop),
   * what completes while it runs is the next. Default `DEFAULT_COMPLETION_BATCH_WINDOW_MS` (2).
   */
  readonly completionBatchWindowMs?: number;
  /** Grace period of `stop()`, 0 ms..24.8 days. Default `DEFAULT_SHUTDOWN_GRACE_MS` (10 000). */
  readonly shutdownGraceMs?: number;
  /** First part of the lease owner `prefix:pid:random`; default the host name. */
  readonly ownerPrefix?: string;
  /**
   * Claim loops in this process, 1..8. Default `DEFAULT_CLAIM_LOOPS` (1). Each loop holds its own lanes (a lease
   * owner of its own) and claims while the others' handlers run, so Node and Postgres work at once; the handler slots
   * (`concurrency`) are shared, each loop claiming at most its share of them. Two can pay off on a deep backlog (see
   * docs/guide/performance.md). While other workers hold lanes too (as a claim of the held lanes reports), the loops
   * claim in turn, one claim of this worker at a time: the other workers' claims keep Postgres busy meanwhile, and
   * several claims of every worker at once cost the server more than they overlap. The second and later loops then rest: each lets its runs end, hands its lanes back and claims again once no
   * other worker holds a lane and a claim comes back full (or when a head it rescheduled is due again). They start so:
   * the first claim of the first loop tells whether another worker holds lanes, and they join in only when it does
   * not and the claim comes back full (several workers starting at once then reach their first handler sooner).
   */
  readonly claimLoops?: number;
  /**
   * With each keyed head it claims, a claim also takes up to this many of that key's next deliveries that are due,
   * 0..100, beyond `batchSize` (default `DEFAULT_FOLLOWERS`, 0: none). They run one after another in this worker, each
   * once the one before it succeeded (a failure releases the rest unrun, in order for their next claim), and hold no
   * handler slot while they wait. Pays off for deep per-key backlogs: one read of a key's run instead of a claim per
   * delivery (see docs/guide/how-it-works.md). A claim brings at most `batchSize` x (1 + this) deliveries: one that finds
   * fewer heads gives each more followers, up to 100 (a few deep keys drain in long runs). At most: each claim loop
   * starts at 1 and doubles the count after every claim. Claims with followers take longer; a retried head is not held
   * up by them, as claims take it ahead of its due time by a lookahead that follows their length, and it starts at its
   * time. A store may ignore it (the memory store does).
   */
  readonly followers?: number;
}

/** `DispatcherOptions` with every default applied. */
export interface ResolvedDispatcherOptions {
  readonly concurrency: number;
  readonly batchSize: number;
  readonly pollIntervalMs: number;
  readonly leaseDurationMs: number;
  readonly completionBatchWindowMs: number;
  readonly shutdownGraceMs: number;
  readonly ownerPrefix: string | undefined;
  readonly claimLoops: number;
  readonly followers: number;
}

/** The bus-wide handler defaults a handler's options fall back on. */
export interface HandlerDefaults {
  readonly maxAttempts: number;
  readonly backoff: BackoffOptions;
  readonly handlerTimeoutMs: number;
}

/** Handler options with the bus defaults applied. */
export interface ResolvedHandlerOptions {
  readonly transactional: boolean;
  readonly maxAttempts: number;
  readonly backoff: BackoffOptions;
  readonly timeoutMs: number;
}

export const integer = (minimum: number, maximum: number) => Type.Optional(Type.Integer({ minimum, maximum }));

export const BackoffSchema = Type.Object(
  {
    initialDelayMs: integer(0, MAX_TIMER_MS),
    maxDelayMs: integer(0, MAX_TIMER_MS),
    multiplier: Type.Optional(Type.Number({ minimum: 1, maximum: 100 })),
    jitter: Type.Optional(Type.Number({ minimum: 0, maximum: 1 })),
  },
  { additionalProperties: false },
);

export const DispatcherSchema = Type.Object(
  {
    concurrency: integer(1, 1_000),
    batchSize: integer(1, 1_000),
    pollIntervalMs: integer(1, DAY_MS),
    leaseDurationMs: integer(100, DAY_MS),
    completionBatchWindowMs: integer(0, 1_000),
    shutdownGraceMs: integer(0, MAX_TIMER_MS),
    ownerPrefix: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    claimLoops: integer(1, MAX_CLAIM_LOOPS),
    followers: integer(0, MAX_FOLLOWERS),
  },
  { additionalProperties: false },
);

/** What `bus.on` validates a handler's options with (exported for the reference's consistency test). */
export const HandlerSchema = Type.Object(
  {
    transactional: Type.Optional(Type.Boolean()),
    maxAttempts: integer(1, 1_000_000),
    backoff: Type.Optional(BackoffSchema),
    timeoutMs: integer(1, MAX_TIMER_MS),
  },
  { additionalProperties: false },
);

const checkers = new Map<TSchema, ReturnType<typeof TypeCompiler.Compile>>();

export function assertSchema(schema: TSchema, value: unknown, what: string, root: string): void {
  let checker = checkers.get(schema);
  if (checker === undefined) checkers.set(schema, (checker = TypeCompiler.Compile(schema)));
  if (checker.Check(value)) return;
  const problems: string[] = [];
  for (const error of checker.Errors(value)) {
    const path =
      [root, ...error.path.split('/').filter((part) => part !== '')].filter((part) => part !== '').join('.') ||
      'options';
    const got = error.message === 'Unexpected property' ? '' : ` (got ${render(error.value)})`;
    problems.push(`${path}: ${error.message}${got}`);
    if (problems.length >= 5) break;
  }
  throw new InvalidOptionsError(
    `Invalid ${what}: ${problems.join('; ')}. See the DEFAULT_* constants for the defaults.`,
  );
}

function render(value: unknown): string {
  if (typeof value === 'number' && !Number.isFinite(value)) return String(value);
  if (typeof value === 'bigint') return `${value}n`;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

export function assertPlainObject(value: unknown, what: string): void {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidOptionsError(
      `${what} must be an object, got ${value === null ? 'null' : Array.isArray(value) ? 'an array' : typeof value}.`,
    );
  }
}

export function assertMethods(value: unknown, methods: readonly string[], what: string, example: string): void {
  const ok =
    typeof value === 'object' &&
    value !== null &&
    methods.every((name) => typeof (value as Record<string, unknown>)[name] === 'function');
  if (!ok)
    throw new InvalidOptionsError(`${what} must be an object with methods ${methods.join(', ')}, e.g. ${example}.`);
}

/** Throw `InvalidOptionsError` unless `value` is a `Logger` (debug, info, warn and error methods). */
export function assertLogger(value: unknown, what = 'logger'): asserts value is Logger {
  assertMethods(value, ['debug', 'info', 'warn', 'error'], what, 'consoleLogger');
}

export function resolveBackoff(
  input: Partial<BackoffOptions> | undefined,
  base: BackoffOptions,
  what: string,
): BackoffOptions {
  const backoff = Object.freeze({ ...base, ...stripUndefined(input ?? {}) });
  if (backoff.maxDelayMs < backoff.initialDelayMs) {
    throw new InvalidOptionsError(
      `Invalid ${what}: maxDelayMs (${backoff.maxDelayMs}) is below initialDelayMs (${backoff.initialDelayMs}); raise maxDelayMs or lower initialDelayMs.`,
    );
  }
  return backoff;
}

function stripUndefined<T extends object>(value: T): Partial<T> {
  return Object.fromEntries(Object.entries(value).filter(([, item]) => item !== undefined)) as Partial<T>;
}

/**
 * Validate dispatcher options and apply the defaults.
 *
 * ```ts
 * resolveDispatcherOptions({ concurrency: 50 }).leaseDurationMs; // 30000
 * ```
 */
export function resolveDispatcherOptions(input: DispatcherOptions = {}): ResolvedDispatcherOptions {
  assertPlainObject(input, 'dispatcher options');
  assertSchema(DispatcherSchema, input, 'dispatcher options', 'dispatcher');
  return Object.freeze({
    concurrency: input.concurrency ?? DEFAULT_CONCURRENCY,
    batchSize: input.batchSize ?? DEFAULT_BATCH_SIZE,
    pollIntervalMs: input.pollIntervalMs ?? DEFAULT_POLL_INTERVAL_MS,
    leaseDurationMs: input.leaseDurationMs ?? DEFAULT_LEASE_DURATION_MS,
    completionBatchWindowMs: input.completionBatchWindowMs ?? DEFAULT_COMPLETION_BATCH_WINDOW_MS,
    shutdownGraceMs: input.shutdownGraceMs ?? DEFAULT_SHUTDOWN_GRACE_MS,
    ownerPrefix: input.ownerPrefix,
    claimLoops: input.claimLoops ?? DEFAULT_CLAIM_LOOPS,
    followers: input.followers ?? DEFAULT_FOLLOWERS,
  });
}

/** Validate the options of one `bus.on(...)` and fill them from the bus defaults. */
export function resolveHandlerOptions(
  input: HandlerOptions,
  defaults: HandlerDefaults,
  handlerName: string,
): ResolvedHandlerOptions {
  const what = `options of handler "${handlerName}"`;
  assertPlainObject(input, what);
  assertSchema(HandlerSchema, input, what, '');
  return Object.freeze({
    transactional: input.transactional ?? false,
    maxAttempts: input.maxAttempts ?? defaults.maxAttempts,
    backoff: resolveBackoff(input.backoff, defaults.backoff, `${what}: backoff`),
    timeoutMs: input.timeoutMs ?? defaults.handlerTimeoutMs,
  });
}
