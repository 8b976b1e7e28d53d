/**
 * Where each lane's walk over its keys resumes (see sql/hot-path/claim-held-lanes.sql). The claim visits a lane's
 * keys in (handler, key) order from just after the key where its last walk ended, wrapping around, so
 * every key of a busy lane gets its turn even when each batch fills, or a walk stops, before the end.
 * Kept by each claim session, for the lanes its owner holds (a claim reports the lanes it handed
 * back): a lane that changes hands simply starts its walk from the beginning.
 */

interface Position {
  readonly handler: string;
  readonly key: string;
}

export class KeyWalkCursors {
  readonly #cursors = new Map<number, Position>();

  /** The statement parameters: lanes, handlers and keys where each of the owner's walks resumes. */
  parameters(): [number[], string[], string[]] {
    const lanes: number[] = [];
    const handlers: string[] = [];
    const keys: string[] = [];
    for (const [lane, at] of this.#cursors) {
      lanes.push(lane);
      handlers.push(at.handler);
      keys.push(at.key);
    }
    return [lanes, handlers, keys];
  }

  /** Move the cursors of the lanes a claim walked: `ends` holds lane, handler and key in turn (the claim's walk_ends). */
  move(ends: readonly string[]): void {
    for (let at = 0; at + 2 < ends.length; at += 3)
      this.#cursors.set(Number(ends[at]), { handler: ends[at + 1]!, key: ends[at + 2]! });
  }

  /** The owner handed these lanes back: their cursors go (not sent with every claim), a lane taken again starts afresh. */
  drop(lanes: readonly (number | string)[]): void {
    for (const lane of lanes) this.#cursors.delete(Number(lane));
  }
}
