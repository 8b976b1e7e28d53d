/**
 * Where each lane's walk over its keys resumes (see sql/claim-held-lanes.sql). The claim visits a lane's
 * keys in (handler, key) order from just after the key where its last walk ended, wrapping around, so
 * every key of a busy lane gets its turn even when each batch fills, or a walk stops, before the end.
 * Kept per owner in the store's memory, for the lanes it holds (a claim reports the lanes it handed
 * back): a lane that changes hands simply starts its walk from the beginning.
 */

interface Position {
  readonly handler: string;
  readonly key: string;
}

export class KeyWalkCursors {
  readonly #byOwner = new Map<string, Map<number, Position>>();

  /** The statement parameters: lanes, handlers and keys where each of the owner's walks resumes. */
  parameters(owner: string): [number[], string[], string[]] {
    const cursors = [...(this.#byOwner.get(owner) ?? new Map<number, Position>())];
    return [cursors.map(([lane]) => lane), cursors.map(([, at]) => at.handler), cursors.map(([, at]) => at.key)];
  }

  /** Move the cursors of the lanes a claim walked: `ends` holds lane, handler and key in turn (the claim's walk_ends). */
  move(owner: string, ends: readonly string[]): void {
    if (ends.length < 3) return;
    let cursors = this.#byOwner.get(owner);
    if (cursors === undefined) this.#byOwner.set(owner, (cursors = new Map()));
    for (let at = 0; at + 2 < ends.length; at += 3)
      cursors.set(Number(ends[at]), { handler: ends[at + 1]!, key: ends[at + 2]! });
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
