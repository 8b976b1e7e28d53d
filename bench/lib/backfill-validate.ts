/**
 * Exactness of a backfill benchmark run (bench/backfill.ts). Events 0..history-1 are the history, published before
 * `indexer` existed; live events are the publisher's committed indexes (>= history). Key of event i: i mod keys. The
 * records are one dispatcher process's handler starts in the order it started them (h 0 = h1, 1 = indexer).
 *
 * - `dispatch`: every history event to h1 exactly once, nothing else;
 * - `mixed`: every live event to h1 and to indexer exactly once, nothing else;
 * - `backfill`: the same, plus every history event to indexer exactly once, and the replay finished with one created
 *   delivery per history event.
 *
 * Every kind: per (handler, key), history in publish order, live in publish order, and no history after a live event
 * of the key that committed after the replay started (`heldLive`; live events before it may run first: the backfill
 * starts after the warm-up, and its hold covers what was not claimed yet); nothing pending or dead afterwards.
 */
import type { ReplayView } from '../../src/index.js';

export interface BackfillRunFacts {
  readonly kind: 'dispatch' | 'mixed' | 'backfill';
  readonly history: number;
  readonly keys: number;
  /** Live events committed. */
  readonly live: Int32Array;
  /** Live events committed after the replay had started: each key's history must come before them. */
  readonly heldLive: Int32Array;
  readonly records: { readonly i: Int32Array; readonly h: Uint8Array };
  readonly remaining: { readonly pending: number; readonly dead: number };
  /** The backfill's final view (kind 'backfill'). */
  readonly replay: ReplayView | null;
  /** Reasons found elsewhere (timeouts, process errors). */
  readonly extra: readonly string[];
}

export interface BackfillVerdict {
  readonly valid: boolean;
  readonly reasons: readonly string[];
  readonly counts: {
    readonly lost: number;
    readonly duplicates: number;
    readonly unexpected: number;
    readonly historyOutOfOrder: number;
    readonly liveOutOfOrder: number;
    readonly historyAfterLive: number;
  };
}

const HANDLER_NAMES = ['h1', 'indexer'];

export function validateBackfill(facts: BackfillRunFacts): BackfillVerdict {
  const { history, keys, live, records } = facts;
  let top = history;
  for (const i of live) top = Math.max(top, i + 1);
  const isLive = new Uint8Array(top);
  for (const i of live) isLive[i] = 1;
  for (const i of facts.heldLive) if (i < top && isLive[i] === 1) isLive[i] = 2;
  // Which (handler, event) pairs the run must deliver: handler h gets history when historyTo[h], live always except
  // in the dispatch cell.
  const historyTo = [facts.kind === 'dispatch', facts.kind === 'backfill'];
  const liveTo = facts.kind !== 'dispatch';
  const counts = [new Uint16Array(top), new Uint16Array(top)];
  let unexpected = 0;
  let historyOutOfOrder = 0;
  let liveOutOfOrder = 0;
  let historyAfterLive = 0;
  // Per (handler, key): the last history and live index seen (-1: none yet), and whether a held live one ran.
  const lastHistory = new Int32Array(2 * keys).fill(-1);
  const lastLive = new Int32Array(2 * keys).fill(-1);
  const heldSeen = new Uint8Array(2 * keys);
  for (let r = 0; r < records.i.length; r += 1) {
    const i = records.i[r]!;
    const h = records.h[r]!;
    const expected = h < 2 && i >= 0 && i < top && (i < history ? historyTo[h] === true : liveTo && isLive[i]! > 0);
    if (!expected) {
      unexpected += 1;
      continue;
    }
    counts[h]![i]! += 1;
    const slot = h * keys + (i % keys);
    if (i < history) {
      if (heldSeen[slot] === 1) historyAfterLive += 1;
      if (i < lastHistory[slot]!) historyOutOfOrder += 1;
      lastHistory[slot] = i;
    } else {
      if (i < lastLive[slot]!) liveOutOfOrder += 1;
      lastLive[slot] = i;
      if (isLive[i] === 2) heldSeen[slot] = 1;
    }
  }
  let lost = 0;
  let duplicates = 0;
  const perHandler = [0, 0].map(() => ({ lost: 0, duplicates: 0 }));
  for (let h = 0; h < 2; h += 1) {
    for (let i = 0; i < top; i += 1) {
      const wanted = i < history ? historyTo[h] === true : liveTo && isLive[i]! > 0;
      if (!wanted) continue;
      const c = counts[h]![i]!;
      if (c === 0) perHandler[h]!.lost += 1;
      else if (c > 1) perHandler[h]!.duplicates += c - 1;
    }
    lost += perHandler[h]!.lost;
    duplicates += perHandler[h]!.duplicates;
  }
  const reasons: string[] = [...facts.extra];
  perHandler.forEach((p, h) => {
    if (p.lost) reasons.push(`${HANDLER_NAMES[h]}: ${p.lost} lost`);
    if (p.duplicates) reasons.push(`${HANDLER_NAMES[h]}: ${p.duplicates} duplicates`);
  });
  if (unexpected) reasons.push(`${unexpected} unexpected deliveries`);
  if (historyOutOfOrder) reasons.push(`${historyOutOfOrder} history deliveries out of their key's publish order`);
  if (liveOutOfOrder) reasons.push(`${liveOutOfOrder} live deliveries out of their key's publish order`);
  if (historyAfterLive)
    reasons.push(`${historyAfterLive} history deliveries after a live one of their key published after the start`);
  if (facts.remaining.pending) reasons.push(`${facts.remaining.pending} pending at the end`);
  if (facts.remaining.dead) reasons.push(`${facts.remaining.dead} dead at the end`);
  if (facts.kind === 'backfill') {
    const view = facts.replay;
    if (view === null) reasons.push('no replay view');
    else {
      if (view.state !== 'finished') reasons.push(`replay ${view.state}, not finished`);
      if (view.created !== history) reasons.push(`replay created ${view.created} deliveries, ${history} expected`);
      if (view.total !== history) reasons.push(`replay planned ${view.total} deliveries, ${history} expected`);
    }
  }
  return {
    valid: reasons.length === 0,
    reasons,
    counts: { lost, duplicates, unexpected, historyOutOfOrder, liveOutOfOrder, historyAfterLive },
  };
}
