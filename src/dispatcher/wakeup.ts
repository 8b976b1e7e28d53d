/**
 * The dispatcher's idle wait: sleep up to the poll interval, or less when something happens that
 * may have made work claimable (a handler slot freed, a completion committed and a key's next
 * delivery became its head). A `wake()` with nobody waiting is remembered, so the next wait returns
 * at once and no wake-up is lost between a claim and the wait that follows it.
 */
export class Wakeup {
  #pending = false;
  #resolve: (() => void) | undefined;
  #timer: NodeJS.Timeout | undefined;

  /** End the current wait now, or the next one as soon as it starts. */
  wake(): void {
    const resolve = this.#resolve;
    if (resolve === undefined) {
      this.#pending = true;
      return;
    }
    this.#settle();
    resolve();
  }

  /** Resolve after `ms`, or earlier on `wake()`. Only one wait at a time. */
  wait(ms: number): Promise<void> {
    if (this.#pending) {
      this.#pending = false;
      return Promise.resolve();
    }
    return new Promise<void>((resolve) => {
      this.#resolve = resolve;
      this.#timer = setTimeout(() => {
        this.#settle();
        resolve();
      }, ms);
    });
  }

  #settle(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#resolve = undefined;
    this.#pending = false;
  }
}
