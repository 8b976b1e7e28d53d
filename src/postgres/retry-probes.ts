/**
 * Keys whose head this store rescheduled, to look up directly once due again (see
 * sql/hot-path/claim-held-lanes.sql, `direct`). Without them a retried head waits until the claim's walk over
 * its lane's keys comes round to it, which in a lane with hundreds of busy keys took several claims.
 *
 * A probe stays until a claim of this store returns its key's head, or until `PROBE_TTL_MS` after it
 * became due: a claim made while its lane was not held by this owner (handed back while the head
 * waited out its backoff, then taken again by the next acquire) looks it up again, instead of leaving
 * the head to the walk, where it could wait seconds behind busy keys. Best effort
 * still: a lane another worker holds, or a head still blocked, is left to the walk, which finds every
 * due head eventually.
 */

interface Probe {
  readonly lane: number;
  readonly handler: string;
  readonly key: string;
  readonly dueAt: number;
}

/** How long after its due time a probe is kept while no claim of this store returned its head. */
export const PROBE_TTL_MS = 10_000;

/** Probes passed to one claim at most (the oldest due first): a burst of failures must not make every claim heavy. */
export const MAX_PROBES_PER_CLAIM = 64;

const probeId = (lane: number, handler: string, key: string): string => `${lane}/${handler}/${key}`;

export class RetryProbes {
  /** By `lane/handler/key`: one probe per key, the latest due time wins. */
  readonly #probes = new Map<string, Probe>();

  /** A keyed delivery was rescheduled to `dueAt`. */
  add(lane: number, handler: string, key: string, dueAt: Date): void {
    const id = probeId(lane, handler, key);
    // Re-inserted so the map's order stays by insertion time, which `due` reads as oldest first.
    this.#probes.delete(id);
    this.#probes.set(id, { lane, handler, key, dueAt: dueAt.getTime() });
  }

  /**
   * The statement parameters (lanes, handlers, keys) of the probes due at `now` or within `lookaheadMs` after it (the
   * claim may take those early, see `ClaimParams.retryLookaheadMs`); expired ones are dropped.
   */
  due(now: number, lookaheadMs = 0): [number[], string[], string[]] {
    const due: Probe[] = [];
    for (const [id, probe] of this.#probes) {
      if (probe.dueAt > now + lookaheadMs) continue;
      if (now - probe.dueAt > PROBE_TTL_MS) {
        this.#probes.delete(id);
        continue;
      }
      if (due.length < MAX_PROBES_PER_CLAIM) due.push(probe);
    }
    return [due.map((p) => p.lane), due.map((p) => p.handler), due.map((p) => p.key)];
  }

  /** The lanes of the probes `due` returns (each once). */
  dueLanes(now: number, lookaheadMs = 0): number[] {
    return [...new Set(this.due(now, lookaheadMs)[0])];
  }

  /** A claim returned these deliveries: the probes of their keys are done. */
  claimed(rows: readonly { lane: number | string; handler: string; key: string | null }[]): void {
    if (this.#probes.size === 0) return;
    for (const row of rows) if (row.key !== null) this.#probes.delete(probeId(Number(row.lane), row.handler, row.key));
  }

  /** Probes kept (tests). */
  get size(): number {
    return this.#probes.size;
  }
}
