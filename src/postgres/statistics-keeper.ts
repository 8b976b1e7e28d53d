import type { RowOf } from './rows.js';
import type { StatementName } from './statements.js';

/** How often a store looks at its tables' statistics, at most (while it claims). */
export const STATISTICS_CHECK_INTERVAL_MS = 1_000;

const ANALYZE: Record<RowOf<'planner-statistics'>['name'], StatementName> = {
  deliveries: 'analyze-deliveries',
  events: 'analyze-events',
};

/** Runs one statement: the look where the claim ran its own (`PgClaimSession.run`), an ANALYZE on the pool. */
type Run = <Row extends object>(name: StatementName, params: readonly unknown[]) => Promise<Row[]>;

/**
 * Keeps the planner's statistics of the deliveries and events tables in step with their size while the store claims.
 * The claims run as generic plans made from those statistics; a table analyzed or vacuumed while nearly empty reads as
 * a page or two (or as pages with no rows, when it kept its pages through a drain), and once a backlog builds the
 * plans read every row for each look-up, until autovacuum analyzes the table again (a minute or more, never with
 * autovacuum off). Now and then (`tick`, after a claim, on the claim's own connection) it asks Postgres whether a table
 * outgrew its statistics (sql/hot-path/planner-statistics.sql) and analyzes the stale ones it owns (on a pool
 * connection, not awaited), which makes every session plan the claims again. A look costs a catalog read; a failed one
 * is left to the next.
 */
export class StatisticsKeeper {
  readonly #intervalMs: number;
  #lastLook = Number.NEGATIVE_INFINITY;
  #looking = false;

  constructor(intervalMs = STATISTICS_CHECK_INTERVAL_MS) {
    this.#intervalMs = intervalMs;
  }

  /**
   * Look now, with `look`, if the last look is older than the interval and none is under way (an ANALYZE it started
   * included); resolves once the look is done. A stale table is analyzed with `analyze`, not awaited: a claim that
   * looked goes on at once, and the next claim does not queue behind an ANALYZE (hundreds of milliseconds on a large
   * events table) on the claim's connection.
   */
  tick(look: Run, analyze: Run, now = Date.now()): Promise<void> {
    if (this.#looking || now - this.#lastLook < this.#intervalMs) return Promise.resolve();
    this.#lastLook = now;
    this.#looking = true;
    const done = () => {
      this.#looking = false;
    };
    return look<RowOf<'planner-statistics'>>('planner-statistics', []).then((tables) => {
      const stale = tables.filter((table) => table.stale && table.owned);
      if (stale.length === 0) return done();
      void (async () => {
        for (const table of stale) await analyze(ANALYZE[table.name], []);
      })()
        .catch(() => {})
        .finally(done);
    }, done);
  }
}
