import { formatLeaseToken } from '../core/lease-token.js';
import type { ClaimedDelivery } from '../store/contract.js';
import type { ParsedLease } from '../store/validate.js';
import { claimedTuples } from './rows.js';

/** The parameters of a fenced write of many leases: ids, lanes, epochs and claims, one array each. */
export function leaseArrays(leases: readonly ParsedLease[]): [string[], number[], string[], number[]] {
  return [
    leases.map((l) => l.deliveryId),
    leases.map((l) => l.lane),
    leases.map((l) => l.epoch),
    leases.map((l) => l.claims),
  ];
}

/**
 * The deliveries of a claim's JSON text (see `ClaimedTuple`); none when it is NULL. Each one's lease is under the epoch
 * its lane was recorded under (`lane_epochs`, `lane:epoch` each); a delivery of a lane not recorded in flight is not
 * claimed (the statement never returns one: its lanes are locked and unchanged since its snapshot).
 */
export function toClaimed(text: string | null, laneEpochs: readonly string[]): ClaimedDelivery[] {
  const tuples = claimedTuples(text);
  if (tuples.length === 0) return [];
  const epochs: string[] = [];
  for (const laneEpoch of laneEpochs) {
    const colon = laneEpoch.indexOf(':');
    epochs[Number(laneEpoch.slice(0, colon))] = laneEpoch.slice(colon + 1);
  }
  // The lease token of a lane's deliveries never claimed before (claims 0, nearly all of them): one string a lane, not one
  // a delivery.
  const firstTokens: string[] = [];
  const claimed: ClaimedDelivery[] = [];
  for (let index = 0; index < tuples.length; index += 1) {
    const [
      id,
      lane,
      claims,
      [eventId, eventType, handler, key],
      sequence,
      payload,
      headers,
      attempts,
      maxAttempts,
      availableAt,
      createdAt,
      early,
      after,
    ] = tuples[index]!;
    const epoch = epochs[lane];
    if (epoch === undefined) continue;
    const leaseToken =
      claims === 0
        ? (firstTokens[lane] ??= formatLeaseToken({ lane, epoch, claims }))
        : formatLeaseToken({ lane, epoch, claims });
    const delivery: ClaimedDelivery = {
      id,
      leaseToken,
      lane,
      eventId,
      eventType,
      handler,
      key,
      sequence,
      payload,
      headers: headers ?? {},
      attempts,
      maxAttempts,
      availableAt: new Date(availableAt),
      createdAt: new Date(createdAt),
    };
    // Set on the object made above rather than spread into a copy: a claim of followers is mostly followers.
    if (after !== null) (delivery as { follows?: string }).follows = after;
    claimed.push(early ? { ...delivery, notBefore: new Date(availableAt) } : delivery);
  }
  return claimed;
}
