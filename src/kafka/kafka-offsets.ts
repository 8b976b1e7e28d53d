/**
 * The offsets of one fetched batch of a partition, settled in any order (the inbox acks messages as their store
 * transactions commit, keys interleaved) and released in order: Kafka keeps one committed offset per partition,
 * "everything before it is done", so an offset is released only once every offset before it in the batch is settled.
 * A message given back (the inbox is stopping) stops the releases: it and everything after it are fetched again by
 * the next consumer of the partition (a redelivery of an event already committed is a duplicate the inbox drops).
 */
export class InOrderOffsets {
  readonly #offsets: readonly string[];
  readonly #settled: boolean[];
  #next = 0;
  #outstanding: number;
  #givenBack = false;

  constructor(offsets: readonly string[]) {
    this.#offsets = offsets;
    this.#settled = offsets.map(() => false);
    this.#outstanding = offsets.length;
  }

  /** Message `index` of the batch is done; returns the offsets this releases, in order (possibly none). */
  settle(index: number): string[] {
    if (this.#settled[index]) return [];
    this.#settled[index] = true;
    this.#outstanding -= 1;
    const released: string[] = [];
    while (!this.#givenBack && this.#next < this.#offsets.length && this.#settled[this.#next]) {
      released.push(this.#offsets[this.#next]!);
      this.#next += 1;
    }
    return released;
  }

  /** Message `index` goes back to Kafka: no offset is released any more. */
  giveBack(index: number): void {
    if (this.#settled[index]) return;
    this.#settled[index] = true;
    this.#outstanding -= 1;
    this.#givenBack = true;
  }

  /** Every message of the batch is settled or given back. */
  get done(): boolean {
    return this.#outstanding === 0;
  }
}
