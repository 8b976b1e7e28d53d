import type { PostgresDriver, SqlExecutor, SqlSession } from './sql-client.js';

/**
 * With `PostgresStoreOptions.holdClaimConnections`, a connection held for each claim loop (each lease owner), where the
 * driver lends one (`PostgresDriver.session`): the owner's claim statements (claim-held-lanes, claim-light,
 * acquire-lanes) run on it, so each is planned once, when the owner first claims, instead of on every connection of the
 * pool a claim lands on (five custom plans and a generic one, several milliseconds each for claim-held-lanes: about a
 * tenth of the server's time in a 50k drain). The owner's other statements (renewals that run beside its claims,
 * completions, hand-backs) stay on the pool.
 *
 * relaybus holds at most half of the pool's connections, its listening one included, so handlers, completions and
 * publishes always find some; beyond that (or where the driver cannot say how large its pool is) an owner claims on the
 * pool as before. A statement that fails on a held connection closes it (the connection may be gone: a terminated
 * backend, a restart); the owner's next claim opens another.
 */
export class ClaimSessions {
  /** Undefined: no connection is held (`PostgresStoreOptions.holdClaimConnections` off); work runs where the caller says. */
  readonly #driver: PostgresDriver<unknown> | undefined;
  /** Connections the store holds besides these (its listening one). */
  readonly #otherHeld: number;
  readonly #byOwner = new Map<string, Promise<SqlSession>>();

  constructor(driver: PostgresDriver<unknown> | undefined, otherHeld: number) {
    this.#driver = driver;
    this.#otherHeld = otherHeld;
  }

  /** Run `work` on `owner`'s connection, or on `pool` when it has none and may not hold one. */
  async run<T>(owner: string, pool: SqlExecutor, work: (executor: SqlExecutor) => Promise<T>): Promise<T> {
    const opening = this.#sessionOf(owner);
    if (opening === undefined) return work(pool);
    let session: SqlSession;
    try {
      session = await opening;
    } catch (error) {
      this.#forget(owner, opening);
      throw error;
    }
    try {
      return await work(session);
    } catch (error) {
      this.#forget(owner, opening);
      await session.release(true);
      throw error;
    }
  }

  /** Give `owner`'s connection back (its lanes were handed back; a later claim of the owner opens another). */
  async release(owner: string): Promise<void> {
    const opening = this.#byOwner.get(owner);
    if (opening === undefined) return;
    this.#byOwner.delete(owner);
    const session = await opening.catch(() => undefined);
    await session?.release(false);
  }

  /** Give every held connection back (the store closes). */
  async releaseAll(): Promise<void> {
    await Promise.all([...this.#byOwner.keys()].map((owner) => this.release(owner)));
  }

  #sessionOf(owner: string): Promise<SqlSession> | undefined {
    const held = this.#byOwner.get(owner);
    if (held !== undefined || this.#driver === undefined) return held;
    const { session, poolSize } = this.#driver;
    if (session === undefined || poolSize === undefined) return undefined;
    if ((this.#byOwner.size + 1 + this.#otherHeld) * 2 > poolSize) return undefined;
    const opening = session.call(this.#driver);
    this.#byOwner.set(owner, opening);
    return opening;
  }

  #forget(owner: string, opening: Promise<SqlSession>): void {
    if (this.#byOwner.get(owner) === opening) this.#byOwner.delete(owner);
  }
}
