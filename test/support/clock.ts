/** A clock tests move by hand, so no test sleeps to make time pass. */
export class StubClock {
  #ms: number;
  constructor(start: Date = new Date('2030-01-01T00:00:00.000Z')) {
    this.#ms = start.getTime();
  }
  now(): Date {
    return new Date(this.#ms);
  }
  advance(ms: number): Date {
    this.#ms += ms;
    return this.now();
  }
}
