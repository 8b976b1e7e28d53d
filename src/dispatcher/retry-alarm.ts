/** The most due times one alarm remembers; beyond them, the poll finds the retries. */
const MAX_ALARMS = 1_000;

/**
 * Wakes a claim loop when a delivery it rescheduled is due again, so the retry starts within one claim of its due time
 * instead of up to a poll interval later (the store looks the retried head up directly once due). One timer, set for
 * the earliest due time; it does not keep the process alive.
 */
export class RetryAlarm {
  /** Due times (monotonic ms), earliest first. */
  readonly #due: number[] = [];
  readonly #onDue: () => void;
  #timer: NodeJS.Timeout | undefined;
  #armedFor: number | undefined;

  constructor(onDue: () => void) {
    this.#onDue = onDue;
  }

  /** Ring once `delayMs` from now. */
  add(delayMs: number): void {
    if (this.#due.length >= MAX_ALARMS || !Number.isFinite(delayMs)) return;
    const at = performance.now() + Math.max(0, delayMs);
    let index = this.#due.length;
    while (index > 0 && this.#due[index - 1]! > at) index -= 1;
    this.#due.splice(index, 0, at);
    this.#arm();
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
    this.#timer = setTimeout(() => this.#ring(), Math.max(0, next - performance.now()));
    this.#timer.unref();
  }

  #ring(): void {
    this.#timer = undefined;
    this.#armedFor = undefined;
    // A timer may fire a little before the clock reads its due time (timers have millisecond granularity).
    const now = performance.now() + 1;
    let passed = 0;
    while (passed < this.#due.length && this.#due[passed]! <= now) passed += 1;
    this.#due.splice(0, passed);
    if (passed > 0) this.#onDue();
    this.#arm();
  }
}
