import type { RowOf } from './rows.js';
import type { StatementName } from './statements.js';

/** How often a store looks at its tables' statistics, at most (while it claims). */
export const STATISTICS_CHECK_INTERVAL_MS = 5_000;

const ANALYZE: Record<RowOf<'planner-statistics'>['name'], StatementName> = {
  deliveries: 'analyze-deliveries',
  events: 'analyze-events',
};

type Run = <Row extends object>(name: StatementName, params: readonly unknown[]) => Promise<Row[]>;

/**
 * Keeps the planner's statistics of the deliveries and events tables in step with their size while the store claims.
 * The claims run as generic plans made from those statistics; a table analyzed or vacuumed while nearly empty reads as
 * a page or two, and once a backlog builds the plans read every row for each look-up, until autovacuum analyzes the
 * table again (a minute or more, never with autovacuum off). Now and then (`tick`, after a claim) it asks Postgres
 * whether a table outgrew its statistics (sql/hot-path/planner-statistics.sql) and analyzes the stale ones it owns,
 * which makes every session plan the claims again. Off the claim's path: a claim never waits for it, and a failure
 * only means the next look.
 */
export class StatisticsKeeper {
  readonly #run: Run;
  readonly #intervalMs: number;
  #lastLook = Number.NEGATIVE_INFINITY;
  #looking = false;

  constructor(run: Run, intervalMs = STATISTICS_CHECK_INTERVAL_MS) {
    this.#run = run;
    this.#intervalMs = intervalMs;
  }

  /** Look now if the last look is older than the interval and none is under way; resolves when it is done. */
  tick(now = Date.now()): Promise<void> {
    if (this.#looking || now - this.#lastLook < this.#intervalMs) return Promise.resolve();
    this.#lastLook = now;
    this.#looking = true;
    return this.#look()
      .catch(() => {})
      .finally(() => {
        this.#looking = false;
      });
  }

  async #look(): Promise<void> {
    const tables = await this.#run<RowOf<'planner-statistics'>>('planner-statistics', []);
    for (const table of tables) if (table.stale && table.owned) await this.#run(ANALYZE[table.name], []);
  }
}
