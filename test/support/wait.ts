import type { TypedEvents } from '../../src/core/emitter.js';
import type { ClaimSession, ClaimSessionOptions, DeliveryLease, Store } from '../../src/store/contract.js';
import { claim, completeAndClaim, forgetInFlight, type OwnerClaimCalls, ownerSession, relinquish } from './claims.js';

/**
 * Helpers for tests that run the real dispatcher: wait on lifecycle events or conditions with a
 * timeout (never a bare sleep), and spy on store calls.
 */

/** A promise with its resolve/reject exposed. */
export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Resolve with the next `name` event matching `filter`; reject after `timeoutMs`. */
export function nextEvent<TMap, K extends keyof TMap>(
  events: TypedEvents<TMap>,
  name: K,
  options: { readonly timeoutMs?: number; readonly filter?: (event: TMap[K]) => boolean } = {},
): Promise<TMap[K]> {
  const timeoutMs = options.timeoutMs ?? 3_000;
  return new Promise<TMap[K]>((resolve, reject) => {
    const timer = setTimeout(() => {
      off();
      reject(new Error(`no "${String(name)}" event within ${timeoutMs} ms`));
    }, timeoutMs);
    const off = events.on(name, (event) => {
      if (options.filter && !options.filter(event)) return;
      clearTimeout(timer);
      off();
      resolve(event);
    });
  });
}

/** Collect every `name` event into an array. */
export function collect<TMap, K extends keyof TMap>(events: TypedEvents<TMap>, name: K): TMap[K][] {
  const seen: TMap[K][] = [];
  events.on(name, (event) => seen.push(event));
  return seen;
}

/** Poll `predicate` every few ms until it holds; reject with `message` after `timeoutMs`. */
export async function waitFor(
  predicate: () => boolean | Promise<boolean>,
  message: string,
  timeoutMs = 3_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await predicate()) return;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for: ${message}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** A short real wait, for asserting that something does NOT happen. */
export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

export interface StoreCall {
  readonly method: string;
  readonly args: readonly unknown[];
}

/**
 * `spyStore` overrides for every method that writes completions (with a claim riding or not), each call going through
 * `around` with its leases and the real write.
 */
export function aroundCompletionWrites<TTx>(
  store: Store<TTx>,
  around: <T>(leases: readonly DeliveryLease[], write: () => Promise<T>) => Promise<T>,
): Partial<Store<TTx>> & Partial<OwnerClaimCalls> {
  const reportingNext = store.completeManyReportingNext?.bind(store);
  return {
    completeAndClaim: (leases, params) => around(leases, () => completeAndClaim(store, leases, params)),
    completeMany: (leases, now) => around(leases, () => store.completeMany(leases, now)),
    ...(reportingNext === undefined
      ? {}
      : { completeManyReportingNext: (leases, now) => around(leases, () => reportingNext(leases, now)) }),
  };
}

/**
 * Wrap a store so every call is recorded; behaviour is unchanged. `overrides` replace methods. The calls of the claim
 * sessions it opens are recorded (and replaced) as the owner's: `claim` and `completeAndClaim` with the owner and the
 * session's options in their params, `forgetInFlight` with `{ owner, holding }`, and a session's `close()` as
 * `relinquish(owner)`; they reach the store through one session per owner (test/support/claims.ts).
 */
export function spyStore<TTx>(
  store: Store<TTx>,
  overrides: Partial<Store<TTx>> & Partial<OwnerClaimCalls> = {},
): { store: Store<TTx>; calls: StoreCall[] } {
  const calls: StoreCall[] = [];
  const target = store as unknown as Record<string, unknown>;
  const methods = [
    'setup',
    'publish',
    'extendLease',
    'completeMany',
    'completeManyReportingNext',
    'complete',
    'reschedule',
    'bury',
    'release',
    'requeue',
    'listDeliveries',
    'statistics',
    'purgeExpired',
    'transaction',
    'close',
    'subscribe',
    'listSubscriptions',
    'listLanes',
    'unsubscribe',
    'subscribeWakeups',
  ] as const;
  const wrapped: Record<string, unknown> = { kind: store.kind, capabilities: store.capabilities };
  for (const method of methods) {
    const original = (overrides as Record<string, unknown>)[method] ?? target[method];
    if (original === undefined) continue; // an optional method the store does not have
    wrapped[method] = (...args: unknown[]) => {
      calls.push({ method, args });
      return (original as (...a: unknown[]) => unknown).apply(method in overrides ? wrapped : store, args);
    };
  }
  // Each call of a session is recorded as the owner's, then replaced by `overrides` or passed on (`ownerSession`).
  const recorded =
    (method: keyof OwnerClaimCalls) =>
    (...args: unknown[]) => {
      calls.push({ method, args });
      const replaced = overrides[method] as ((...a: unknown[]) => unknown) | undefined;
      return replaced === undefined
        ? (passOn[method] as (...a: unknown[]) => unknown)(...args)
        : replaced.apply(wrapped, args);
    };
  const passOn: OwnerClaimCalls = {
    claim: (params) => claim(store, params),
    completeAndClaim: (leases, params) => completeAndClaim(store, leases, params),
    forgetInFlight: (params) => forgetInFlight(store, params),
    relinquish: (owner) => relinquish(store, owner),
  };
  const recording = {
    claim: recorded('claim'),
    completeAndClaim: recorded('completeAndClaim'),
    forgetInFlight: recorded('forgetInFlight'),
    relinquish: recorded('relinquish'),
  } as OwnerClaimCalls;
  wrapped.openClaims = (owner: string, options?: ClaimSessionOptions): ClaimSession =>
    ownerSession(store, owner, options, recording);
  return { store: wrapped as unknown as Store<TTx>, calls };
}
