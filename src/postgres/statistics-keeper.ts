import { PlanSizes } from './plan-sizes.js';
import type { RowOf } from './rows.js';
import type { StatementName } from './statements.js';

/** How often a claim session looks at the tables' statistics, at most (while it claims). */
export const STATISTICS_CHECK_INTERVAL_MS = 1_000;
/**
 * A claim this long (ms) is slow: the next look comes sooner, at most every `SLOW_CLAIM_LOOK_INTERVAL_MS`. A plan made
 * on a heap of a few pages slows every claim as the heap grows (a heap that grows by tens of pages a second, as when a
 * replay starts and its handlers' live deliveries wait, took claims from 50 to 230 ms within the second a look waited).
 */
export const SLOW_CLAIM_MS = 50;
export const SLOW_CLAIM_LOOK_INTERVAL_MS = 100;

const ANALYZE: Record<RowOf<'planner-statistics'>['name'], StatementName> = {
  deliveries: 'analyze-deliveries',
  events: 'analyze-events',
};

/** Runs one statement: the look where the claim ran its own (`PgClaimSession.run`), an ANALYZE on the pool. */
type Run = <Row extends object>(name: StatementName, params: readonly unknown[]) => Promise<Row[]>;

/**
 * Keeps the planner's statistics of the deliveries and events tables in step with their size while the store claims:
 * one per store, fed by its claim sessions' looks (`StatisticsWatch`). The claims run as generic plans made from those
 * statistics; a table analyzed or vacuumed while nearly empty reads as a page or two (or as pages with no rows, when it
 * kept its pages through a drain), and once a backlog builds the plans read every row for each look-up, until
 * autovacuum analyzes the table again (a minute or more, never with autovacuum off). A stale table it owns is analyzed
 * on a pool connection, one ANALYZE at a time, not awaited: no claim queues behind it (hundreds of milliseconds on a
 * large events table). The new statistics make every session plan the claims again.
 */
export class StatisticsKeeper {
  /** The ANALYZE under way (it holds a pool connection until it ends). */
  #analyzing: Promise<void> | undefined;

  /** Analyze the stale tables among `tables` with `analyze`, unless an ANALYZE is under way. A failure is left to the next look. */
  analyzeStale(tables: readonly RowOf<'planner-statistics'>[], analyze: Run): void {
    const stale = tables.filter((table) => table.stale && table.owned);
    if (stale.length === 0 || this.#analyzing !== undefined) return;
    this.#analyzing = (async () => {
      for (const table of stale) await analyze(ANALYZE[table.name], []);
    })()
      .catch(() => {})
      .finally(() => {
        this.#analyzing = undefined;
      });
  }

  /** Resolves once no ANALYZE is under way: a stopping worker gives every connection back. */
  async settled(): Promise<void> {
    await this.#analyzing;
  }
}

/**
 * One claim session's looks at the statistics (sql/hot-path/planner-statistics.sql), now and then after a claim, on the
 * claim's own connection: a stale table goes to the store's `StatisticsKeeper`, and plans of the connection that a
 * heap has outgrown are dropped (`PlanSizes`). A look costs a catalog read (and, when a table looks outgrown, a count
 * of its rows up to the ones its statistics hold); a failed one is left to the next.
 */
export class StatisticsWatch {
  readonly #keeper: StatisticsKeeper;
  readonly #intervalMs: number;
  readonly #plans = new PlanSizes();
  #lastLook = Number.NEGATIVE_INFINITY;
  #looking = false;

  constructor(keeper: StatisticsKeeper, intervalMs = STATISTICS_CHECK_INTERVAL_MS) {
    this.#keeper = keeper;
    this.#intervalMs = intervalMs;
  }

  /**
   * Look now, with `look`, if the last look is older than the interval (`SLOW_CLAIM_LOOK_INTERVAL_MS` after a claim
   * of `claimMs` >= `SLOW_CLAIM_MS`) and none is under way; resolves once the look (and a `discardPlans` it calls for)
   * is done. `discardPlans` is absent where the claims do not run on a connection of their own (they are then planned
   * wherever they land).
   */
  async tick(
    look: Run,
    analyze: Run,
    discardPlans: (() => Promise<unknown>) | undefined,
    claimMs: number,
    now = Date.now(),
  ): Promise<void> {
    const interval =
      claimMs >= SLOW_CLAIM_MS ? Math.min(SLOW_CLAIM_LOOK_INTERVAL_MS, this.#intervalMs) : this.#intervalMs;
    if (this.#looking || now - this.#lastLook < interval) return;
    this.#lastLook = now;
    this.#looking = true;
    try {
      const tables = await look<RowOf<'planner-statistics'>>('planner-statistics', []);
      this.#keeper.analyzeStale(tables, analyze);
      if (this.#plans.outgrown(tables) && discardPlans !== undefined) await discardPlans();
    } catch {
      // Left to the next look.
    } finally {
      this.#looking = false;
    }
  }
}
