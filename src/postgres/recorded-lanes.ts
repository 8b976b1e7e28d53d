/**
 * The lanes a claim session's claims recorded deliveries in and have not handed back since, kept by the session:
 * claim-light locks these (and the lanes a wake-up named) by primary key instead of scanning the 256 lane rows for the
 * owner's. Four lanes to a page (postgres-supplement.sql), that scan read 64-90 pages, about a fifth of the statement's
 * time under a light load, which is what a publish waits for.
 *
 * A hint, not the truth, and safe as one: a lane listed that the owner no longer holds (lost to a takeover,
 * relinquished) is filtered out by the statement's owner check; a lane held but not listed (acquired by acquire-lanes
 * and left held by the claim after it) waits for claim-held-lanes, which finds held lanes by owner and runs at least
 * once a poll interval, as it does for the heads claim-light does not read.
 */
export class RecordedLanes {
  readonly #lanes = new Set<number>();

  /** A claim answered: the lanes it recorded deliveries in (`lane:epoch`) and those it handed back. */
  claimed(laneEpochs: readonly string[], handedBack: readonly (number | string)[]): void {
    for (const laneEpoch of laneEpochs) this.#lanes.add(Number.parseInt(laneEpoch, 10));
    for (const lane of handedBack) this.#lanes.delete(Number(lane));
  }

  /** The lanes to look at, with `named` ones (a wake-up's) after them. */
  of(named: readonly number[] = []): number[] {
    return this.#lanes.size === 0 ? [...named] : [...this.#lanes, ...named];
  }
}
