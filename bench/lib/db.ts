/**
 * Database plumbing of the harness: which server and database to use, the statistics read around
 * every run (WAL position, pg_stat_user_tables counters) and the WAL attribution through
 * pg_walinspect (the server is shared, so a global LSN delta also counts other sessions' writes).
 */
import pg from 'pg';
import { serverCpuMs } from './server-cpu.js';

export const DEFAULT_DATABASE_URL = 'postgres://postgres@127.0.0.1:5432/test';

/** The server the harness talks to: `DATABASE_URL`, default the local server. */
export function serverUrl(): string {
  return process.env.DATABASE_URL ?? DEFAULT_DATABASE_URL;
}

/** `url` with its database name replaced. */
export function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = '/' + database;
  return parsed.toString();
}

export async function connect(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  return client;
}

/**
 * A database of the harness's own (`BENCH_DATABASE`, default `relaybus_bench`), created on the
 * server of `DATABASE_URL` and dropped by `dropBenchDatabase`. When the role may not create
 * databases the run uses `DATABASE_URL` itself (schemas are still per contender and dropped).
 */
export async function createBenchDatabase(fallbackName = 'relaybus_bench'): Promise<{ url: string; created: boolean }> {
  const base = serverUrl();
  const name = process.env.BENCH_DATABASE ?? fallbackName;
  if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`BENCH_DATABASE must be a plain identifier, got ${name}`);
  const admin = await connect(base);
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
    await admin.query(`CREATE DATABASE ${name}`);
    return { url: withDatabase(base, name), created: true };
  } catch (error) {
    console.warn(`[bench] cannot create database ${name} (${(error as Error).message}); using DATABASE_URL itself`);
    return { url: base, created: false };
  } finally {
    await admin.end();
  }
}

export async function dropBenchDatabase(url: string): Promise<void> {
  const name = new URL(url).pathname.slice(1);
  const admin = await connect(serverUrl());
  try {
    await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`);
  } finally {
    await admin.end();
  }
}

/** Try to create an extension; false (with the reason logged once) when the server lacks it. */
export async function tryExtension(client: pg.Client, name: string): Promise<boolean> {
  try {
    await client.query(`CREATE EXTENSION IF NOT EXISTS ${name}`);
    return true;
  } catch (error) {
    console.warn(`[bench] extension ${name} unavailable: ${(error as Error).message}`);
    return false;
  }
}

export interface TableCounters {
  readonly ins: number;
  readonly upd: number;
  readonly hotUpd: number;
  readonly del: number;
  readonly dead: number;
  readonly live: number;
}

export interface Snapshot {
  readonly lsn: string;
  readonly at: number;
  readonly tables: Readonly<Record<string, TableCounters>>;
  /** CPU the server has used so far (bench/lib/server-cpu.ts); undefined when it is not on this machine. */
  readonly serverCpuMs: number | undefined;
}

/** Current WAL position and the counters of every table of `schema`. */
export async function snapshot(client: pg.Client, schema: string): Promise<Snapshot> {
  await client.query('SELECT pg_stat_clear_snapshot()');
  const { rows } = await client.query<{
    relname: string;
    ins: string;
    upd: string;
    hot: string;
    del: string;
    dead: string;
    live: string;
  }>(
    `SELECT relname, n_tup_ins AS ins, n_tup_upd AS upd, n_tup_hot_upd AS hot, n_tup_del AS del, n_dead_tup AS dead, n_live_tup AS live
     FROM pg_stat_user_tables WHERE schemaname = $1`,
    [schema],
  );
  const {
    rows: [wal],
  } = await client.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn');
  const tables: Record<string, TableCounters> = {};
  for (const row of rows) {
    tables[row.relname] = {
      ins: Number(row.ins),
      upd: Number(row.upd),
      hotUpd: Number(row.hot),
      del: Number(row.del),
      dead: Number(row.dead),
      live: Number(row.live),
    };
  }
  return { lsn: wal!.lsn, at: Date.now(), tables, serverCpuMs: await serverCpuMs(client) };
}

/** Counter deltas of one table (or the sum over tables matching a pattern) between two snapshots (dead and live: the value after). */
export function tableDelta(before: Snapshot, after: Snapshot, table: string | RegExp): TableCounters {
  const zero = { ins: 0, upd: 0, hotUpd: 0, del: 0, dead: 0, live: 0 };
  const names =
    typeof table === 'string'
      ? [table]
      : [...new Set([...Object.keys(before.tables), ...Object.keys(after.tables)])].filter((n) => table.test(n));
  const sum = { ...zero };
  for (const name of names) {
    const a = before.tables[name] ?? zero;
    const b = after.tables[name] ?? a;
    sum.ins += b.ins - a.ins;
    sum.upd += b.upd - a.upd;
    sum.hotUpd += b.hotUpd - a.hotUpd;
    sum.del += b.del - a.del;
    sum.dead += b.dead;
    sum.live += b.live;
  }
  return sum;
}

/** Sum of a counter over every table of the schema. */
export function schemaDelta(before: Snapshot, after: Snapshot, field: 'ins' | 'upd' | 'hotUpd' | 'del'): number {
  let total = 0;
  for (const table of new Set([...Object.keys(before.tables), ...Object.keys(after.tables)]))
    total += tableDelta(before, after, table)[field];
  return total;
}

/** Bytes of WAL between two LSNs, server-wide. */
export async function walBytes(client: pg.Client, from: string, to: string): Promise<number> {
  const {
    rows: [row],
  } = await client.query<{ bytes: string }>('SELECT pg_wal_lsn_diff($2::pg_lsn, $1::pg_lsn)::text AS bytes', [
    from,
    to,
  ]);
  return Number(row!.bytes);
}

/**
 * WAL written for this database only: the records between two LSNs that touch a relation of this
 * database, plus the commit records of the transactions that wrote them (pg_walinspect, Postgres
 * 15+). Undefined when pg_walinspect is not installed. Full-page images are included, as in the
 * LSN delta.
 */
export async function ownWalBytes(client: pg.Client, from: string, to: string): Promise<number | undefined> {
  try {
    // pg_walinspect reads only flushed WAL; asynchronous commits (synchronous_commit = off) may still
    // sit in WAL buffers: wait for the WAL writer (wal_writer_delay, 200 ms by default), bounded.
    // Other sessions' open transactions may keep WAL unflushed longer: then stop at the flushed end.
    for (let waited = 0; ; waited += 50) {
      const {
        rows: [f],
      } = await client.query<{ flushed: boolean; end: string }>(
        'SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn AS flushed, pg_current_wal_flush_lsn()::text AS end',
        [to],
      );
      if (f!.flushed) break;
      if (waited >= 3_000) {
        to = f!.end;
        break;
      }
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    const {
      rows: [row],
    } = await client.query<{ bytes: string | null }>(
      `WITH recs AS (
         SELECT xid, record_length, block_ref FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
       ), db AS (
         SELECT '/' || oid::text || '/' AS tag FROM pg_database WHERE datname = current_database()
       ), ours AS (
         SELECT DISTINCT xid FROM recs, db WHERE recs.block_ref LIKE '%' || db.tag || '%' AND xid <> 0
       )
       SELECT sum(record_length)::text AS bytes FROM recs, db
       WHERE recs.block_ref LIKE '%' || db.tag || '%' OR recs.xid IN (SELECT xid FROM ours)`,
      [from, to],
    );
    return Number(row?.bytes ?? 0);
  } catch (error) {
    console.warn(`[bench] pg_walinspect attribution failed: ${(error as Error).message}`);
    return undefined;
  }
}

/** Run `fn` on one pooled client between BEGIN and COMMIT (ROLLBACK when it throws): every contender's publish. */
export async function inTransaction<T>(pool: pg.Pool, fn: (client: pg.PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (error) {
    await client.query('ROLLBACK').catch(() => {});
    throw error;
  } finally {
    client.release();
  }
}

/**
 * Connections a dispatcher process opens before "go": its pool size, but at most 40 over all the
 * dispatcher processes of a run (at least 4 each). The server is shared (max_connections 100 here)
 * and the libraries use far fewer connections than their pool size at once (a claim loop and a few
 * completion writes; pg-boss one per work() loop): warming every pool in full with 4 processes would
 * take 80 connections from the tests running beside the benchmark.
 */
export function warmSize(poolSize: number): number {
  const processes = Math.max(1, Number(process.env.BENCH_DISPATCHER_SLOTS ?? 1));
  return Math.min(poolSize, Math.max(4, Math.floor(40 / processes)));
}

/** Open warmSize(size) connections of `pool` at once (then release them): the pool's start-up, outside the timed window. */
export async function warmPool(pool: pg.Pool, size: number): Promise<void> {
  const clients = await Promise.all(Array.from({ length: warmSize(size) }, () => pool.connect()));
  for (const client of clients) client.release();
}
