import type {
  BuryParams,
  CompleteManyResult,
  DeliveryLease,
  ExtendLeaseParams,
  ExtendLeaseResult,
  RescheduleParams,
} from '../store/contract.js';
import {
  assertOptionalDate,
  parseLease,
  parseLeases,
  validateBury,
  validateExtendLease,
  validateReschedule,
  type ParsedLease,
} from '../store/validate.js';
import { leaseArrays } from './claimed-deliveries.js';
import type { RowOf } from './rows.js';
import type { PostgresDriver } from './sql-client.js';
import type { StatementName } from './statements.js';
import type { StoreContext } from './store-context.js';

/**
 * The fenced writes of the Postgres store (complete, reschedule, bury, release) and lease renewal. Each statement
 * writes only while the lane still has the lease's epoch, still lists the delivery in flight and the delivery's claims
 * counter equals the lease's; otherwise it returns no row, and the write reports `false`.
 */

const iso = (date: Date | undefined): string | null => (date === undefined ? null : date.toISOString());

/** Run a fenced single-delivery write; true when the statement returned its row. */
async function fenced(
  context: StoreContext,
  name: StatementName,
  lease: ParsedLease,
  extra: readonly unknown[],
): Promise<boolean> {
  const rows = await context.runOwned(name, [lease.deliveryId, lease.lane, lease.epoch, lease.claims, ...extra]);
  return rows.length > 0;
}

/** Run a fenced write of many deliveries (`extra`: the statement's parameters after the lease arrays). */
async function fencedMany<Name extends 'complete-many' | 'release'>(
  context: StoreContext,
  name: Name,
  leases: readonly DeliveryLease[],
  now: Date | undefined,
  extra: readonly unknown[],
): Promise<{ done: boolean[]; rows: RowOf<Name>[] }> {
  const parsed = parseLeases(leases);
  assertOptionalDate(now, 'now');
  if (parsed.length === 0) return { done: [], rows: [] };
  const rows = await context.runOwned<RowOf<Name>>(name, [...leaseArrays(parsed), ...extra]);
  const ids = new Set(rows.map((row) => row.id));
  // A lease listed twice succeeds once, as it would in two calls.
  return { done: parsed.map((lease) => ids.delete(lease.deliveryId)), rows };
}

export async function extendLease(context: StoreContext, params: ExtendLeaseParams): Promise<ExtendLeaseResult> {
  validateExtendLease(params);
  if (params.lanes.length === 0) return { extended: [], lost: [] };
  const rows = await context.runOwned<RowOf<'extend-lease'>>('extend-lease', [
    params.owner,
    params.lanes.map((l) => l.lane),
    params.lanes.map((l) => l.epoch),
    params.leaseDurationMs,
    iso(params.now),
  ]);
  const extended = new Set(rows.map((row) => Number(row.lane)));
  const lanes = params.lanes.map((l) => l.lane);
  return { extended: lanes.filter((l) => extended.has(l)), lost: lanes.filter((l) => !extended.has(l)) };
}

export async function completeMany(
  context: StoreContext,
  leases: readonly DeliveryLease[],
  now: Date | undefined,
): Promise<boolean[]> {
  return (await fencedMany(context, 'complete-many', leases, now, [context.history, iso(now)])).done;
}

export async function completeManyReportingNext(
  context: StoreContext,
  leases: readonly DeliveryLease[],
  now: Date | undefined,
): Promise<CompleteManyResult> {
  const { done, rows } = await fencedMany(context, 'complete-many', leases, now, [context.history, iso(now)]);
  return { completed: done, nextDue: rows.some((row) => row.next_due) };
}

/** Complete one delivery in the caller's transaction `tx` (unwrapped by `driver`). */
export async function complete<TTx>(
  context: StoreContext,
  driver: PostgresDriver<TTx>,
  tx: TTx,
  lease: DeliveryLease,
  now: Date | undefined,
): Promise<boolean> {
  const parsed = parseLease(lease);
  assertOptionalDate(now, 'now');
  const rows = await context.run(driver.unwrap(tx), 'complete-one', [
    parsed.deliveryId,
    parsed.lane,
    parsed.epoch,
    parsed.claims,
    context.history,
    iso(now),
  ]);
  return rows.length > 0;
}

export async function reschedule(
  context: StoreContext,
  lease: DeliveryLease,
  params: RescheduleParams,
): Promise<boolean> {
  const parsed = parseLease(lease);
  const error = validateReschedule(params);
  const [row] = await context.runOwned<RowOf<'reschedule'>>('reschedule', [
    parsed.deliveryId,
    parsed.lane,
    parsed.epoch,
    parsed.claims,
    iso(params.availableAt),
    error,
    iso(params.now),
  ]);
  // A keyed head retried: every claim session of this store looks it up directly once due (`RetryProbes`).
  if (row?.key != null) context.probes.add(Number(row.lane), row.handler, row.key, params.availableAt);
  return row !== undefined;
}

export async function bury(context: StoreContext, lease: DeliveryLease, params: BuryParams): Promise<boolean> {
  const parsed = parseLease(lease);
  const error = validateBury(params);
  return fenced(context, 'bury', parsed, [error, iso(params.now)]);
}

export async function release(
  context: StoreContext,
  leases: readonly DeliveryLease[],
  now: Date | undefined,
): Promise<boolean[]> {
  return (await fencedMany(context, 'release', leases, now, [iso(now)])).done;
}
