/** The most due times one alarm remembers (the earliest); beyond them, the poll finds the retries. */
const MAX_ALARMS = 1_000;
/** Due times closer than this ring once (see `add`). */
const COALESCE_MS = 1;

/**
 * Wakes a claim loop when a delivery it rescheduled is due again, so the retry starts within one claim of its due time
 * instead of up to a poll interval later (the store looks the retried head up directly once due). One timer, set for
 * the earliest due time; it does not keep the process alive.
 */
export class RetryAlarm {
  /** Due times (monotonic ms), earliest first. */
  readonly #due: number[] = [];
  readonly #onDue: () => void;
  readonly #clock: () => number;
  #timer: NodeJS.Timeout | undefined;
  #armedFor: number | undefined;

  /** `clock`: monotonic milliseconds (tests pass their own). */
  constructor(onDue: () => void, clock: () => number = () => performance.now()) {
    this.#onDue = onDue;
    this.#clock = clock;
  }

  /**
   * Ring once `delayMs` from now. Due times less than `COALESCE_MS` apart ring once, at the later one (never early for
   * either): a batch of failures rescheduled together would otherwise ring once each, microseconds apart.
   */
  add(delayMs: number): void {
    if (!Number.isFinite(delayMs)) return;
    const at = this.#clock() + Math.max(0, delayMs);
    let index = this.#due.length;
    while (index > 0 && this.#due[index - 1]! > at) index -= 1;
    if (index < this.#due.length && this.#due[index]! - at < COALESCE_MS) return;
    if (index > 0 && at - this.#due[index - 1]! < COALESCE_MS) {
      this.#due[index - 1] = at;
    } else {
      // Full: the latest is forgotten rather than this one when this one comes sooner (retries minutes away, a poison
      // key's, must not keep one due in a second from ringing).
      if (this.#due.length >= MAX_ALARMS) {
        if (index === this.#due.length) return;
        this.#due.pop();
      }
      this.#due.splice(index, 0, at);
    }
    this.#arm();
  }

  /** Some due time has not rung yet. */
  get pending(): boolean {
    return this.#due.length > 0;
  }

  /** Forget every due time. */
  stop(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#armedFor = undefined;
    this.#due.length = 0;
  }

  #arm(): void {
    const next = this.#due[0];
    if (next === undefined || (this.#armedFor !== undefined && this.#armedFor <= next)) return;
    clearTimeout(this.#timer);
    this.#armedFor = next;
    this.#timer = setTimeout(() => this.#ring(), Math.max(0, next - this.#clock()));
    this.#timer.unref();
  }

  #ring(): void {
    this.#timer = undefined;
    this.#armedFor = undefined;
    // Never early: a timer may fire before the clock reads its due time (timers count whole milliseconds from the
    // event loop's cached time), and a claim that starts before the retried head is due finds nothing and leaves it
    // to the next poll. An early timer is set again for what remains.
    const now = this.#clock();
    let passed = 0;
    while (passed < this.#due.length && this.#due[passed]! <= now) passed += 1;
    this.#due.splice(0, passed);
    if (passed > 0) this.#onDue();
    this.#arm();
  }
}
