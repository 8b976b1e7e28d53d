/**
 * Where each lane's walk over its keys resumes (see sql/claim-held-lanes.sql). The claim visits a lane's
 * keys in (handler, key) order from just after the key it picked last, wrapping around, so every key of
 * a busy lane gets its turn even when each batch fills before the walk ends. Kept per owner in the
 * store's memory, for the lanes it holds (a claim reports the lanes it handed back): a lane that changes
 * hands simply starts its walk from the beginning.
 */

/** A claimed row as the cursor needs it. */
export interface WalkedRow {
  readonly lane: number | string;
  readonly handler: string;
  readonly key: string | null;
  /** Position in the lane's walk; null for unkeyed rows. */
  readonly walk_step: number | string | null;
}

interface Position {
  readonly handler: string;
  readonly key: string;
  readonly step: number;
}

export class KeyWalkCursors {
  readonly #byOwner = new Map<string, Map<number, Position>>();

  /** The statement parameters: lanes, handlers and keys where each of the owner's walks resumes. */
  parameters(owner: string): [number[], string[], string[]] {
    const cursors = [...(this.#byOwner.get(owner) ?? new Map<number, Position>())];
    return [cursors.map(([lane]) => lane), cursors.map(([, at]) => at.handler), cursors.map(([, at]) => at.key)];
  }

  /** Move each lane's cursor to the last key picked by one claim statement (in walk order). */
  advance(owner: string, rows: readonly WalkedRow[]): void {
    const last = new Map<number, Position>();
    for (const row of rows) {
      if (row.walk_step === null || row.key === null) continue;
      const lane = Number(row.lane);
      const step = Number(row.walk_step);
      if ((last.get(lane)?.step ?? 0) < step) last.set(lane, { handler: row.handler, key: row.key, step });
    }
    if (last.size === 0) return;
    let cursors = this.#byOwner.get(owner);
    if (cursors === undefined) this.#byOwner.set(owner, (cursors = new Map()));
    for (const [lane, at] of last) cursors.set(lane, at);
  }

  /** The owner handed these lanes back: their cursors go (not sent with every claim), a lane taken again starts afresh. */
  drop(owner: string, lanes: readonly (number | string)[]): void {
    const cursors = this.#byOwner.get(owner);
    if (cursors !== undefined) for (const lane of lanes) cursors.delete(Number(lane));
  }

  /** The owner handed its lanes back: its walks start afresh. */
  forget(owner: string): void {
    this.#byOwner.delete(owner);
  }
}
