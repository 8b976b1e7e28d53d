import { InvalidStateError } from '../core/errors.js';
import type {
  ClaimClock,
  ClaimedDelivery,
  ClaimParams,
  ClaimSession,
  ClaimSessionOptions,
  CompleteAndClaimResult,
  DeliveryLease,
} from '../store/contract.js';
import { parseLeases, validateClaim, validateForgetInFlight } from '../store/validate.js';
import { ClaimCycle } from './claim-cycle.js';
import { FailedClaims } from './failed-claims.js';
import type { HeldConnection } from './held-connections.js';
import { KeyWalkCursors } from './key-walk-cursors.js';
import { RecordedLanes } from './recorded-lanes.js';
import type { RowOf } from './rows.js';
import type { StatementName } from './statements.js';
import { StatisticsWatch } from './statistics-keeper.js';
import type { StoreContext } from './store-context.js';

/**
 * One owner's claims on the Postgres store (`Store.openClaims`). Everything the store remembers between an owner's
 * claims is here, so `close()` forgets it with the lanes: where each held lane's key walk resumes (`KeyWalkCursors`),
 * the lanes its claims recorded work in (`RecordedLanes`), what its failed claims named (`FailedClaims`), whether it
 * likely holds lanes, the lanes its last claim took, the store's clock at its last claim while a replay runs, and its
 * held connection (`HeldConnection`). One claim is a `ClaimCycle` (claim-cycle.ts).
 */
export class PgClaimSession implements ClaimSession {
  readonly owner: string;
  readonly siblingOwners: readonly string[];
  readonly walks = new KeyWalkCursors();
  readonly recordedLanes = new RecordedLanes();
  readonly failedClaims = new FailedClaims();
  /**
   * The last claim claimed or completed something, so the owner may hold lanes. False (new, or its last claim found
   * nothing): it likely holds none, so its claim takes free lanes first (see `ClaimCycle.run`).
   */
  mayHoldLanes = false;
  /** Lanes the last claim that took any took in all: the next claim's first round (`acquireRounds`). */
  lanesTakenLast: number | undefined;
  /** The store's clock at the last claim statement, while a replay runs (its replay_clock). */
  replayClock: ClaimClock | undefined;
  /** The connection the claims run on (`ClaimSessionOptions.holdConnection`); undefined: the pool. */
  readonly connection: HeldConnection | undefined;
  readonly #context: StoreContext;
  /** Its looks at the tables' statistics after claims (and the sizes its connection's plans were made at). */
  readonly #statistics: StatisticsWatch;
  #closed = false;

  constructor(context: StoreContext, owner: string, options: ClaimSessionOptions | undefined) {
    this.#context = context;
    this.owner = owner;
    this.siblingOwners = options?.siblingOwners ?? [];
    this.connection = options?.holdConnection === true ? context.held.connection() : undefined;
    this.#statistics = new StatisticsWatch(context.statistics);
  }

  async claim(params: ClaimParams): Promise<ClaimedDelivery[]> {
    this.#assertOpen();
    validateClaim(params);
    const started = performance.now();
    const { claimed } = await new ClaimCycle(this.#context, this, params, []).run();
    await this.#lookAtStatistics(performance.now() - started);
    return claimed;
  }

  async completeAndClaim(leases: readonly DeliveryLease[], params: ClaimParams): Promise<CompleteAndClaimResult> {
    this.#assertOpen();
    const parsed = parseLeases(leases);
    validateClaim(params);
    const started = performance.now();
    const result = await new ClaimCycle(this.#context, this, params, parsed).run();
    await this.#lookAtStatistics(performance.now() - started);
    return result;
  }

  /** After a claim that took `claimMs`: a look at the statistics when one is due (sooner after a slow claim). */
  #lookAtStatistics(claimMs: number): Promise<void> {
    const discardPlans = this.connection === undefined ? undefined : () => this.run('discard-plans', []);
    return this.#statistics.tick(this.run, this.#context.runOwned, discardPlans, claimMs);
  }

  /** Run one statement where this session's claims run: on its held connection (`HeldConnection`), else the pool. */
  readonly run = <Row extends object>(name: StatementName, values: readonly unknown[]): Promise<Row[]> => {
    const { run, driver } = this.#context;
    const connection = this.connection;
    return connection === undefined
      ? run<Row>(driver.executor, name, values)
      : connection.run(driver.executor, (executor) => run<Row>(executor, name, values));
  };

  async forgetInFlight(holding: readonly string[]): Promise<number> {
    validateForgetInFlight(holding);
    const rows = await this.#context.runOwned<RowOf<'forget-in-flight'>>('forget-in-flight', [
      this.owner,
      holding,
      this.failedClaims.namedLanes(),
    ]);
    this.failedClaims.forgotten();
    let forgotten = 0;
    for (const row of rows) forgotten += Number(row.forgotten);
    return forgotten;
  }

  async close(): Promise<number> {
    this.#closed = true;
    try {
      return (await this.#context.runOwned('relinquish', [this.owner])).length;
    } finally {
      await this.connection?.release();
      await this.#context.statistics.settled();
    }
  }

  #assertOpen(): void {
    if (this.#closed)
      throw new InvalidStateError(
        `The claim session of ${this.owner} is closed; open another with store.openClaims(owner) to claim again.`,
      );
  }
}
