import type { PostgresDriver, SqlExecutor, SqlSession } from './sql-client.js';

/**
 * With `PostgresStoreOptions.holdClaimConnections`, a connection held for each claim session opened with
 * `holdConnection` (each claim loop of a worker), where the driver lends one (`PostgresDriver.session`): the session's
 * claim statements (claim-held-lanes, claim-light, acquire-lanes) run on it, so each is planned once, when the session
 * first claims, instead of on every connection of the pool a claim lands on (five custom plans and a generic one,
 * each costly for claim-held-lanes: a visible share of the server's time in a short drain). The owner's
 * other statements (renewals that run beside its claims, completions, hand-backs) stay on the pool.
 *
 * relaybus holds at most half of the pool's connections, its listening one included, so handlers, completions and
 * publishes always find some; beyond that (or where the driver cannot say how large its pool is) a session claims on
 * the pool as before. A statement that fails on a held connection closes it (the connection may be gone: a terminated
 * backend, a restart); the session's next claim opens another.
 */
export class HeldConnections {
  /** Undefined: no connection is held (`PostgresStoreOptions.holdClaimConnections` off); work runs on the pool. */
  readonly #driver: PostgresDriver<unknown> | undefined;
  /** Connections the store holds besides these (its listening one). */
  readonly #otherHeld: number;
  /** The sessions' connections held or being opened. */
  readonly #held = new Set<HeldConnection>();

  constructor(driver: PostgresDriver<unknown> | undefined, otherHeld: number) {
    this.#driver = driver;
    this.#otherHeld = otherHeld;
  }

  /** A claim session's handle: it holds nothing until its first claim. */
  connection(): HeldConnection {
    return new HeldConnection(this);
  }

  /** Open a connection for `holder` when the driver lends one and the pool has room; undefined: run on the pool. */
  open(holder: HeldConnection): Promise<SqlSession> | undefined {
    if (this.#driver === undefined) return undefined;
    const { session, poolSize } = this.#driver;
    if (session === undefined || poolSize === undefined) return undefined;
    if ((this.#held.size + 1 + this.#otherHeld) * 2 > poolSize) return undefined;
    this.#held.add(holder);
    return session.call(this.#driver);
  }

  /** `holder` holds its connection no more. */
  forget(holder: HeldConnection): void {
    this.#held.delete(holder);
  }

  /** Give every held connection back (the store closes). */
  async releaseAll(): Promise<void> {
    await Promise.all([...this.#held].map((holder) => holder.release()));
  }
}

/** The connection one claim session holds, opened at its first claim (see `HeldConnections`). */
export class HeldConnection {
  readonly #pool: HeldConnections;
  #opening: Promise<SqlSession> | undefined;

  constructor(pool: HeldConnections) {
    this.#pool = pool;
  }

  /** Run `work` on the held connection, or on `pool` when none may be held. */
  async run<T>(pool: SqlExecutor, work: (executor: SqlExecutor) => Promise<T>): Promise<T> {
    const opening = (this.#opening ??= this.#pool.open(this));
    if (opening === undefined) return work(pool);
    let session: SqlSession;
    try {
      session = await opening;
    } catch (error) {
      this.#forget(opening);
      throw error;
    }
    try {
      return await work(session);
    } catch (error) {
      this.#forget(opening);
      await session.release(true);
      throw error;
    }
  }

  /** Give the connection back (the session closed; a later claim of it would open another). */
  async release(): Promise<void> {
    const opening = this.#opening;
    if (opening === undefined) return;
    this.#forget(opening);
    const session = await opening.catch(() => undefined);
    await session?.release(false);
  }

  #forget(opening: Promise<SqlSession>): void {
    if (this.#opening !== opening) return;
    this.#opening = undefined;
    this.#pool.forget(this);
  }
}
