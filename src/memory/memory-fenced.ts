import type {
  BuryParams,
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
} from '../store/validate.js';
import { timeOf, type MemoryState, type MemoryTransaction } from './memory-state.js';

/** The memory store's fenced writes and lease renewal: each checks the lane's epoch, its in-flight list and the claims counter. */
export class MemoryFenced {
  constructor(readonly data: MemoryState) {}

  async extendLease(params: ExtendLeaseParams): Promise<ExtendLeaseResult> {
    this.data.assertOpen();
    validateExtendLease(params);
    const now = timeOf(params.now);
    const extended: number[] = [];
    const lost: number[] = [];
    for (const { lane, epoch } of params.lanes) {
      const record = this.data.lanes[lane]!;
      if (record.owner === params.owner && record.epoch === BigInt(epoch)) {
        record.leaseExpiresAt = now + params.leaseDurationMs;
        extended.push(lane);
      } else {
        lost.push(lane);
      }
    }
    return { extended, lost };
  }

  async completeMany(leases: readonly DeliveryLease[], now?: Date): Promise<boolean[]> {
    this.data.assertOpen();
    const parsed = parseLeases(leases);
    assertOptionalDate(now, 'now');
    const at = timeOf(now);
    return parsed.map((lease) => this.data.applyCompletion(lease, at));
  }

  async complete(lease: DeliveryLease, tx: MemoryTransaction, now?: Date): Promise<boolean> {
    this.data.assertOpen();
    const parsed = parseLease(lease);
    assertOptionalDate(now, 'now');
    const state = this.data.openTransaction(tx);
    if (!this.data.fenced(parsed)) return false;
    this.data.locked.set(parsed.deliveryId, parsed.lane);
    state.completions.push({ lease: parsed, now: timeOf(now) });
    return true;
  }

  async reschedule(lease: DeliveryLease, params: RescheduleParams): Promise<boolean> {
    this.data.assertOpen();
    const parsed = parseLease(lease);
    const error = validateReschedule(params);
    const delivery = this.data.fenced(parsed);
    if (!delivery) return false;
    delivery.attempts += 1;
    delivery.availableAt = params.availableAt.getTime();
    delivery.lastError = error;
    this.data.endClaim(delivery, timeOf(params.now));
    return true;
  }

  async bury(lease: DeliveryLease, params: BuryParams): Promise<boolean> {
    this.data.assertOpen();
    const parsed = parseLease(lease);
    const error = validateBury(params);
    const delivery = this.data.fenced(parsed);
    if (!delivery) return false;
    delivery.attempts += 1;
    delivery.status = 'dead';
    delivery.lastError = error;
    this.data.endClaim(delivery, timeOf(params.now));
    return true;
  }

  async release(leases: readonly DeliveryLease[], now?: Date): Promise<boolean[]> {
    this.data.assertOpen();
    const parsed = parseLeases(leases);
    assertOptionalDate(now, 'now');
    const at = timeOf(now);
    return parsed.map((lease) => {
      const delivery = this.data.fenced(lease);
      if (!delivery) return false;
      this.data.endClaim(delivery, at);
      return true;
    });
  }
}
