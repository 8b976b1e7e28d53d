/**
 * Keys whose head this store rescheduled, to look up directly once due again (see
 * sql/claim-held-lanes.sql, `probed`). Without them a retried head waits until the claim's walk over
 * its lane's keys comes round to it, which in a lane with hundreds of busy keys took several claims.
 * Best effort by design: a probe is used once; a lane held by another worker, or a head still blocked,
 * is left to the walk, which finds every due head eventually.
 */

interface Probe {
  readonly lane: number;
  readonly handler: string;
  readonly key: string;
  readonly dueAt: number;
}

export class RetryProbes {
  /** By `lane/handler/key`: one probe per key, the latest due time wins. */
  readonly #probes = new Map<string, Probe>();

  /** A keyed delivery was rescheduled to `dueAt`. */
  add(lane: number, handler: string, key: string, dueAt: Date): void {
    this.#probes.set(`${lane}/${handler}/${key}`, { lane, handler, key, dueAt: dueAt.getTime() });
  }

  /** The statement parameters (lanes, handlers, keys) of the probes due at `now`, which are used up. */
  takeDue(now: number): [number[], string[], string[]] {
    const due: Probe[] = [];
    for (const [id, probe] of this.#probes) {
      if (probe.dueAt > now) continue;
      due.push(probe);
      this.#probes.delete(id);
    }
    return [due.map((p) => p.lane), due.map((p) => p.handler), due.map((p) => p.key)];
  }
}
