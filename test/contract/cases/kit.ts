/**
 * What every contract case file shares: the case type, capability names, and small fixtures that
 * only go through the Harness API (so they work for every store and every driver).
 */
import assert from 'node:assert/strict';
import { RelayBusError, type RelayBusErrorCode } from '../../../src/core/errors.js';
import { parseLeaseToken } from '../../../src/core/lease-token.js';
import type {
  ClaimedDelivery,
  DeliveryLease,
  DeliveryView,
  PublishParams,
  PublishResult,
  StoreCapabilities,
} from '../../../src/store/contract.js';
import type { ContractTarget, Harness } from '../../support/harness.js';
import * as owners from '../../support/claims.js';

/** Capabilities a case can require; a target without one registers the case as skipped, with the reason. */
export type Capability = {
  [K in keyof StoreCapabilities]: StoreCapabilities[K] extends boolean ? K : never;
}[keyof StoreCapabilities];

export interface CaseContext<TTx> {
  /** Fresh (reset) store for this case. */
  readonly harness: Harness<TTx>;
  /** To open an extra harness with other options (completion history). Close it in `finally`. */
  readonly target: ContractTarget<TTx>;
}

export interface ContractCase {
  /** Reads as behaviour: "a stale token after takeover cannot complete". */
  readonly name: string;
  readonly needs?: readonly Capability[];
  run<TTx>(context: CaseContext<TTx>): Promise<void>;
}

export interface CaseGroup {
  readonly area: string;
  readonly cases: readonly ContractCase[];
}

/** Lease duration used by every claim in the suite. */
export const LEASE_MS = 30_000;
/** Enough to get past a lease taken at the current instant. */
export const PAST_LEASE_MS = LEASE_MS + 1;

export const H1 = 'h1';
export const H2 = 'h2';

/** A published event, one handler `h1` with 5 attempts unless overridden. */
export function event(overrides: Partial<PublishParams> = {}): PublishParams {
  return {
    type: 'test.event',
    payload: { n: 1 },
    handlers: [{ name: H1, maxAttempts: 5 }],
    ...overrides,
  };
}

export function handlers(...names: string[]): PublishParams['handlers'] {
  return names.map((name) => ({ name, maxAttempts: 5 }));
}

/** Publish in a committed transaction at the harness clock. */
export async function publish<TTx>(harness: Harness<TTx>, events: readonly PublishParams[]): Promise<PublishResult[]> {
  const now = harness.clock.now();
  return harness.inTransaction((tx) => harness.store.publish(tx, events, now));
}

export interface ClaimOptions {
  readonly handlers?: readonly string[];
  readonly limit?: number;
}

export async function claim<TTx>(
  harness: Harness<TTx>,
  owner: string,
  options: ClaimOptions = {},
): Promise<ClaimedDelivery[]> {
  return owners.claim(harness.store, {
    owner,
    handlers: options.handlers ?? [H1, H2],
    limit: options.limit ?? 10,
    leaseDurationMs: LEASE_MS,
    now: harness.clock.now(),
  });
}

/** Claim and expect exactly these event ids (in this order), returning the claims. */
export async function claimExpecting<TTx>(
  harness: Harness<TTx>,
  owner: string,
  eventIds: readonly string[],
  options: ClaimOptions = {},
): Promise<ClaimedDelivery[]> {
  const claimed = await claim(harness, owner, options);
  assert.deepEqual(
    claimed.map((c) => c.eventId),
    eventIds,
    `claim by ${owner}`,
  );
  return claimed;
}

export function leaseOf(claimed: ClaimedDelivery): DeliveryLease {
  return { deliveryId: claimed.id, leaseToken: claimed.leaseToken };
}

export function epochOf(claimed: ClaimedDelivery): bigint {
  return BigInt(parseLeaseToken(claimed.leaseToken).epoch);
}

export function claimsOf(claimed: ClaimedDelivery): number {
  return parseLeaseToken(claimed.leaseToken).claims;
}

/** Every delivery the store lists (all statuses), id ascending. */
export async function allDeliveries<TTx>(harness: Harness<TTx>): Promise<DeliveryView[]> {
  const items: DeliveryView[] = [];
  let cursor: string | undefined;
  for (;;) {
    const page = await harness.store.listDeliveries({ limit: 1000, ...(cursor === undefined ? {} : { cursor }) });
    items.push(...page.items);
    if (page.nextCursor === null) return items;
    cursor = page.nextCursor;
  }
}

/** Re-read one delivery; fails when it does not exist. */
export async function viewOf<TTx>(harness: Harness<TTx>, deliveryId: string): Promise<DeliveryView> {
  const found = (await allDeliveries(harness)).find((d) => d.id === deliveryId);
  assert.ok(found, `delivery ${deliveryId} should exist`);
  return found;
}

/** The fields a fenced write would change; compare before and after to prove it changed nothing. */
export function mutableFields(view: DeliveryView): Record<string, unknown> {
  return {
    status: view.status,
    attempts: view.attempts,
    availableAt: view.availableAt.getTime(),
    lastError: view.lastError,
    updatedAt: view.updatedAt.getTime(),
  };
}

/** Expect a RelayBusError with this code. */
export async function rejectsWithCode(promise: Promise<unknown>, code: RelayBusErrorCode): Promise<void> {
  await assert.rejects(promise, (error: unknown) => {
    assert.ok(error instanceof RelayBusError, `expected a RelayBusError, got ${String(error)}`);
    assert.equal(error.code, code, error.message);
    return true;
  });
}

export function compareSequence(a: string | null, b: string | null): number {
  assert.ok(a !== null && b !== null, 'keyed deliveries carry a sequence');
  return BigInt(a) < BigInt(b) ? -1 : BigInt(a) > BigInt(b) ? 1 : 0;
}

export interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
}

export function deferred<T = void>(): Deferred<T> {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}

/** A short real wait, only for cases that race real connections (never to make time pass: use the clock). */
export function pause(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
