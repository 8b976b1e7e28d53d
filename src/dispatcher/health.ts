/** The bus's readiness: written by its setup and its dispatcher's claims, read through `bus.health()`. */

/** Whether a bus can reach its store; see `RelayBus.health()`. */
export interface RelayBusHealth {
  /** True while the dispatcher's last claim succeeded; false before the first one, after a failed one and once stopped. */
  readonly ready: boolean;
  /** When `ready` last changed (the bus's creation before that). */
  readonly since: Date;
  /** The failure that made the bus unready (its name and message); absent while ready. */
  readonly lastError?: string;
}

/** The health of one bus, written by its setup and its dispatcher, read through `bus.health()`. */
export class HealthState {
  #ready = false;
  #since = new Date();
  #lastError: string | undefined;

  /** A frozen copy of the current health. */
  snapshot(): RelayBusHealth {
    return Object.freeze({
      ready: this.#ready,
      since: this.#since,
      ...(this.#lastError === undefined ? {} : { lastError: this.#lastError }),
    });
  }

  /** A store call succeeded; true when that made the bus ready. */
  markReady(): boolean {
    if (this.#ready) return false;
    this.#ready = true;
    this.#since = new Date();
    this.#lastError = undefined;
    return true;
  }

  /** A store call failed (`error`), or the bus stopped (no error); true when that made the bus unready. */
  markUnready(error?: string): boolean {
    this.#lastError = error;
    if (!this.#ready) return false;
    this.#ready = false;
    this.#since = new Date();
    return true;
  }
}
