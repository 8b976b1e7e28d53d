import type { PayloadIssue } from './events.js';
import type { Instrumentation } from './instrumentation.js';
import type { BackoffOptions } from './retry-policy.js';

/**
 * The shapes shared by the bus (which registers handlers) and the dispatcher (which runs them):
 * what a handler receives, how it is configured, and the lifecycle events reported about it.
 */

/** What a handler knows about the delivery it runs. */
export interface DeliveryInfo {
  /** The delivery id: one (event, handler) pair. */
  readonly id: string;
  readonly eventId: string;
  readonly eventType: string;
  readonly handler: string;
  readonly key: string | null;
  /** Position in the key's commit order; null for unkeyed events. */
  readonly sequence: string | null;
  /** This attempt, 1-based (attempts already charged + 1). */
  readonly attempt: number;
  readonly maxAttempts: number;
  readonly headers: Readonly<Record<string, string>>;
  /** When the event was published. */
  readonly createdAt: Date;
}

/** The second argument of every handler. */
export interface HandlerContext {
  readonly delivery: DeliveryInfo;
  /**
   * Aborted when the handler times out, when its lane lease is lost, or when the bus stops and the
   * grace period is over. Pass it to fetch/database calls: a handler that ignores it keeps running
   * after relaybus has moved on (its result is then ignored).
   */
  readonly signal: AbortSignal;
}

/** The context of a handler registered with `{ transactional: true }`. */
export interface TransactionalHandlerContext<TTx> extends HandlerContext {
  /**
   * A transaction of the store's driver. The delivery's completion is written in it after the
   * handler returns, so the handler's writes and the completion commit together or not at all.
   */
  readonly transaction: TTx;
}

/** Per-handler settings; each one overrides the bus default. */
export interface HandlerOptions {
  /** Run inside a store transaction that also records the completion (effectively-once). Default false. */
  readonly transactional?: boolean;
  /** Attempts before the delivery is dead-lettered; stored with each delivery at publish. */
  readonly maxAttempts?: number;
  /** Backoff between attempts; missing fields come from the bus default. */
  readonly backoff?: Partial<BackoffOptions>;
  /** Abort (and count as failed) an attempt running longer than this. */
  readonly timeoutMs?: number;
}

/** A registered handler with every option resolved (internal to the bus and dispatcher). */
export interface ResolvedHandler<TTx> {
  readonly name: string;
  readonly eventType: string;
  readonly transactional: boolean;
  readonly maxAttempts: number;
  readonly backoff: BackoffOptions;
  readonly timeoutMs: number;
  readonly fn: (payload: unknown, context: HandlerContext & { readonly transaction?: TTx }) => unknown;
  /** The event's schema rules a claimed payload breaks (a payload published from SQL was never checked). */
  readonly payloadIssues: (payload: unknown) => readonly PayloadIssue[];
  /** The bus's `instrumentation` when it wraps handler calls (`runHandler`); absent otherwise. */
  readonly instrumentation?: Instrumentation;
}

/** A delivery's handler finished and its completion was committed. */
export interface DeliveredEvent {
  readonly delivery: DeliveryInfo;
  readonly durationMs: number;
}

/** An attempt failed and the delivery was rescheduled. */
export interface FailedEvent {
  readonly delivery: DeliveryInfo;
  readonly error: unknown;
  readonly durationMs: number;
  /** When the next attempt becomes due. */
  readonly retryAt: Date;
}

/** The last allowed attempt failed, or the handler threw `PermanentFailure`: the delivery is dead until `requeue`. */
export interface DeadEvent {
  readonly delivery: DeliveryInfo;
  readonly error: unknown;
  readonly durationMs: number;
}

/**
 * The worker lost the lane lease of a delivery (it expired and another worker took the lane): the
 * delivery runs again elsewhere and this worker's result is dropped, never written.
 */
export interface LeaseLostEvent {
  readonly delivery: DeliveryInfo;
  /** `renewal`: extendLease reported the lane lost; `claim`: a later claim saw the lane at a newer epoch; `outcome`: a fenced write returned false. */
  readonly detectedBy: 'renewal' | 'claim' | 'outcome';
}

/** Lifecycle events of `bus.lifecycle`, for metrics and alerting. */
export interface RelayBusEventMap {
  readonly delivered: DeliveredEvent;
  readonly failed: FailedEvent;
  readonly dead: DeadEvent;
  readonly 'lease-lost': LeaseLostEvent;
}
