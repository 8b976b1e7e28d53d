import type { RowOf } from './rows.js';

/** One table as the statistics look sees it (sql/hot-path/planner-statistics.sql). */
type TableSize = Pick<RowOf<'planner-statistics'>, 'name' | 'pages' | 'analyzed_pages' | 'analyzed_rows'>;

interface Planned {
  /** The heap's pages when the plans were made (about). */
  readonly pages: number;
  /** The statistics they were made from: when these change, every session plans again. */
  readonly statistics: string;
}

/**
 * The heap sizes one connection's cached claim plans were made for, per table. A held connection plans each claim
 * statement once, generically, and keeps the plan until the table's statistics change; a plan made while a queue's heap
 * held a page or two (at a worker's start after a drain, or after VACUUM truncated it) reads that heap for every key it
 * visits, which costs nothing then and hundreds of milliseconds a claim once the heap has grown. The statistics keeper
 * does not analyze a queue at a low moment (sql/hot-path/planner-statistics.sql), so such a connection drops its plans
 * instead (sql/hot-path/discard-plans.sql) once a heap grows past twice the pages they were made at.
 */
export class PlanSizes {
  readonly #planned = new Map<string, Planned>();

  /**
   * Whether `tables`, as seen now, outgrew the plans. Outgrown plans are to be dropped: from then on they count as
   * made at today's sizes. The first look sets the sizes (the session's first claim planned just before it).
   */
  outgrown(tables: readonly TableSize[]): boolean {
    const seen = tables.map((table) => ({
      table,
      sizes: { pages: table.pages, statistics: `${table.analyzed_pages}/${table.analyzed_rows}` },
    }));
    let outgrown = false;
    for (const { table, sizes } of seen) {
      const planned = this.#planned.get(table.name);
      if (planned === undefined) this.#planned.set(table.name, sizes);
      // New statistics: the plans were made again, at about the size the statistics saw.
      else if (planned.statistics !== sizes.statistics)
        this.#planned.set(table.name, { pages: table.analyzed_pages, statistics: sizes.statistics });
      else if (table.pages > 2 * (planned.pages + 2)) outgrown = true;
    }
    if (outgrown) for (const { table, sizes } of seen) this.#planned.set(table.name, sizes);
    return outgrown;
  }
}
