/**
 * Growable typed-array log of handled deliveries: event index, handler index, handler start and
 * end time (ms on the machine's clock, `machineNow`; end = start for a synchronous no-op handler).
 */
export class Recorder {
  i = new Int32Array(1 << 16);
  h = new Uint8Array(1 << 16);
  t = new Float64Array(1 << 16);
  e = new Float64Array(1 << 16);
  length = 0;

  add(i: number, handler: number, start: number, end: number): void {
    if (this.length === this.i.length) {
      const size = this.i.length * 2;
      const i = new Int32Array(size);
      i.set(this.i);
      this.i = i;
      const h = new Uint8Array(size);
      h.set(this.h);
      this.h = h;
      const t = new Float64Array(size);
      t.set(this.t);
      this.t = t;
      const e = new Float64Array(size);
      e.set(this.e);
      this.e = e;
    }
    this.i[this.length] = i;
    this.h[this.length] = handler;
    this.t[this.length] = start;
    this.e[this.length] = end;
    this.length += 1;
  }

  take(): { i: Int32Array; h: Uint8Array; t: Float64Array; e: Float64Array } {
    return {
      i: this.i.slice(0, this.length),
      h: this.h.slice(0, this.length),
      t: this.t.slice(0, this.length),
      e: this.e.slice(0, this.length),
    };
  }
}

/**
 * Milliseconds on the machine's monotonic clock (since boot), with sub-millisecond resolution: comparable across the
 * harness's processes, and unmoved when the wall clock is stepped. The wall clock is not: each process reads it once,
 * at its start (`performance.timeOrigin`), so a step between the harness's start and a child's would put every handler
 * of a run seconds away from its "go".
 */
export const machineNow = (): number => Number(process.hrtime.bigint()) / 1e6;

let offset: number | undefined;

/**
 * Add to a `machineNow` time for wall-clock milliseconds (subtract from a wall-clock time, such as a library's `Date`,
 * for the machine's clock): read once per process, at the edge of a wall-clock millisecond, so that it is exact to
 * microseconds rather than off by up to the millisecond `Date.now()` drops (a retry would read as starting before it
 * was due).
 */
export function wallClockOffset(): number {
  if (offset === undefined) {
    const before = Date.now();
    let now = before;
    while (now === before) now = Date.now();
    offset = now - machineNow();
  }
  return offset;
}
