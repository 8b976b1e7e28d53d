/**
 * Exactness of one run. For every (event, handler) pair the handled set must equal the published
 * set (lost 0, unexpected 0), no pair may run twice (duplicates 0), deliveries of one key and
 * handler must start in publish order (order violations 0; only for contenders that promise
 * ordering), and the contender must end with nothing pending and nothing dead-lettered. A run that
 * fails any check is INVALID: its figures are kept in the JSON for diagnosis but never reported.
 */
import { HANDLERS, type Remaining } from './lib/types.js';

export interface Records {
  readonly i: Int32Array;
  readonly h: Uint8Array;
  readonly t: Float64Array;
}

export interface Exactness {
  readonly valid: boolean;
  readonly expected: number;
  readonly handled: number;
  readonly lost: number;
  readonly unexpected: number;
  readonly duplicates: number;
  /** null: the contender does not promise per-key order, so it was not checked. */
  readonly orderViolations: number | null;
  readonly pending: number;
  readonly dead: number;
  readonly reasons: readonly string[];
}

/** Concatenate the records of several dispatcher processes. */
export function mergeRecords(parts: readonly Records[]): Records {
  const length = parts.reduce((sum, p) => sum + p.i.length, 0);
  const i = new Int32Array(length);
  const h = new Uint8Array(length);
  const t = new Float64Array(length);
  let offset = 0;
  for (const p of parts) {
    i.set(p.i, offset); h.set(p.h, offset); t.set(p.t, offset);
    offset += p.i.length;
  }
  return { i, h, t };
}

/**
 * @param published event indexes that were committed
 * @param keyOfEvent the ordering key (as a number) of event i
 */
export function validate(published: Int32Array, records: Records, keyOfEvent: (i: number) => number, ordered: boolean, remaining: Remaining): Exactness {
  const handlers = HANDLERS.length;
  let max = 0;
  for (const i of published) if (i > max) max = i;
  for (const i of records.i) if (i > max) max = i;
  const expected = new Uint8Array((max + 1) * handlers);
  for (const i of published) for (let h = 0; h < handlers; h += 1) expected[i * handlers + h] = 1;
  const seen = new Uint32Array((max + 1) * handlers);
  for (let r = 0; r < records.i.length; r += 1) seen[records.i[r]! * handlers + records.h[r]!]! += 1;
  let lost = 0;
  let unexpected = 0;
  let duplicates = 0;
  for (let p = 0; p < expected.length; p += 1) {
    const count = seen[p]!;
    if (expected[p] && count === 0) lost += 1;
    if (!expected[p] && count > 0) unexpected += 1;
    if (count > 1) duplicates += count - 1;
  }
  let orderViolations: number | null = null;
  if (ordered) {
    orderViolations = 0;
    const index = Array.from({ length: records.i.length }, (_, r) => r);
    const key = (r: number) => keyOfEvent(records.i[r]!) * handlers + records.h[r]!;
    index.sort((a, b) => key(a) - key(b) || records.t[a]! - records.t[b]! || records.i[a]! - records.i[b]!);
    for (let k = 1; k < index.length; k += 1) {
      const a = index[k - 1]!;
      const b = index[k]!;
      if (key(a) === key(b) && records.i[b]! <= records.i[a]!) orderViolations += 1;
    }
  }
  const reasons: string[] = [];
  if (lost) reasons.push(`${lost} lost`);
  if (unexpected) reasons.push(`${unexpected} unexpected`);
  if (duplicates) reasons.push(`${duplicates} duplicates`);
  if (orderViolations) reasons.push(`${orderViolations} order violations`);
  if (remaining.pending) reasons.push(`${remaining.pending} still pending`);
  if (remaining.dead) reasons.push(`${remaining.dead} dead`);
  return {
    valid: reasons.length === 0, expected: published.length * handlers, handled: records.i.length, lost, unexpected, duplicates,
    orderViolations, pending: remaining.pending, dead: remaining.dead, reasons,
  };
}
