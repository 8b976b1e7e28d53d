import { renderTable, type Column } from '../table.js';

/**
 * The write-amplification evidence the demo can read from Postgres itself: per relaybus table, the
 * rows inserted, updated (and how many of those were heap-only, HOT) and deleted, from
 * `pg_stat_user_tables`. Statistics reach that view only when the backend flushes them, so the
 * reader forces a flush and runs one more statement first.
 */

/** Counters of one table. */
export interface TableWrites {
  readonly table: string;
  readonly inserted: number;
  readonly updated: number;
  readonly hotUpdated: number;
  readonly deleted: number;
}

/** Runs one query on the demo's database connection. */
export type QueryFn = <Row>(text: string, params?: unknown[]) => Promise<{ rows: Row[] }>;

/** Read the counters of every relaybus table in `schema`. */
export async function readTableWrites(query: QueryFn, schema: string): Promise<TableWrites[]> {
  await query('SELECT pg_stat_force_next_flush()');
  await query('SELECT 1'); // the flush happens when the backend goes idle after the previous statement
  const { rows } = await query<{ relname: string; ins: number; upd: number; hot: number; del: number }>(
    `SELECT relname, n_tup_ins::int AS ins, n_tup_upd::int AS upd, n_tup_hot_upd::int AS hot, n_tup_del::int AS del
     FROM pg_stat_user_tables WHERE schemaname = $1 AND relname LIKE 'relaybus\\_%' AND relname <> 'relaybus_migrations'
     ORDER BY relname`,
    [schema],
  );
  return rows.map((row) => ({
    table: row.relname,
    inserted: Number(row.ins),
    updated: Number(row.upd),
    hotUpdated: Number(row.hot),
    deleted: Number(row.del),
  }));
}

/** `after - before` per table (tables missing in `before` count from zero). */
export function writesSince(before: readonly TableWrites[], after: readonly TableWrites[]): TableWrites[] {
  return after.map((row) => {
    const base = before.find((candidate) => candidate.table === row.table);
    return base === undefined
      ? row
      : {
          table: row.table,
          inserted: row.inserted - base.inserted,
          updated: row.updated - base.updated,
          hotUpdated: row.hotUpdated - base.hotUpdated,
          deleted: row.deleted - base.deleted,
        };
  });
}

const COLUMNS: readonly Column<TableWrites>[] = [
  { header: 'table', value: (row) => row.table },
  { header: 'inserted', align: 'right', value: (row) => String(row.inserted) },
  { header: 'updated', align: 'right', value: (row) => String(row.updated) },
  { header: 'of them HOT', align: 'right', value: (row) => String(row.hotUpdated) },
  { header: 'deleted', align: 'right', value: (row) => String(row.deleted) },
];

/** The counters as table lines. */
export function tableWritesTable(rows: readonly TableWrites[]): string[] {
  return renderTable(COLUMNS, rows);
}

/** A percentage with no decimals, or '-' for 0 of 0. */
export function percent(part: number, whole: number): string {
  return whole === 0 ? '-' : `${Math.round((100 * part) / whole)}%`;
}
