/**
 * Database figures of one run, from two snapshots (before "go", after every child has exited so its
 * backends have flushed their table statistics) and the statement counts of the child processes.
 *
 * - WAL bytes: the server-wide LSN delta (`pg_current_wal_lsn`) and, when pg_walinspect is available,
 *   the bytes of the WAL records that belong to this database ("own"): the server is shared with
 *   other sessions, whose writes the LSN delta also counts. Per delivery (or per event) both.
 * - updates per delivery: `n_tup_upd` of the delivery (job) table over the deliveries handled.
 * - HOT share of lane updates: `n_tup_hot_upd / n_tup_upd` of the lane table (relaybus only).
 * - dead tuples after: `n_dead_tup` of the delivery table right after the run (autovacuum may be off
 *   on the server: then nothing has been reclaimed).
 * - statements per delivery: statements the processes sent (client-side count, BEGIN/COMMIT
 *   included), because pg_stat_statements needs shared_preload_libraries.
 * - server CPU per delivery: the CPU time of the server's processes between the snapshots, when it
 *   runs on this machine (bench/lib/server-cpu.ts).
 */
import type pg from 'pg';
import { ownWalBytes, schemaDelta, tableDelta, walBytes, type Snapshot } from './lib/db.js';
import type { Contender } from './lib/types.js';

export interface DbFigures {
  readonly walBytes: number;
  readonly ownWalBytes: number | null;
  readonly walPerUnit: number;
  readonly ownWalPerUnit: number | null;
  readonly deliveryUpdates: number;
  readonly updatesPerUnit: number;
  readonly schemaUpdates: number;
  readonly laneUpdates: number | null;
  readonly laneHotShare: number | null;
  readonly deadTuplesAfter: number;
  readonly statements: number;
  readonly statementsPerUnit: number;
  /** Server CPU per unit (microseconds) between the snapshots; null when the server is not on this machine. */
  readonly serverCpuUsPerUnit: number | null;
}

export async function dbFigures(
  admin: pg.Client,
  contender: Contender,
  before: Snapshot,
  after: Snapshot,
  units: number,
  statements: Record<string, { count: number; ms: number }>,
  walinspect: boolean,
): Promise<DbFigures> {
  const wal = await walBytes(admin, before.lsn, after.lsn);
  const own = walinspect ? ((await ownWalBytes(admin, before.lsn, after.lsn)) ?? null) : null;
  const deliveries = tableDelta(before, after, contender.tables.deliveries);
  const lanes = contender.tables.lanes ? tableDelta(before, after, contender.tables.lanes) : undefined;
  const statementCount = Object.values(statements).reduce((sum, s) => sum + s.count, 0);
  const per = (value: number) => (units > 0 ? value / units : NaN);
  return {
    walBytes: wal,
    ownWalBytes: own,
    walPerUnit: per(wal),
    ownWalPerUnit: own === null ? null : per(own),
    deliveryUpdates: deliveries.upd,
    updatesPerUnit: per(deliveries.upd),
    schemaUpdates: schemaDelta(before, after, 'upd'),
    laneUpdates: lanes ? lanes.upd : null,
    laneHotShare: lanes && lanes.upd > 0 ? lanes.hotUpd / lanes.upd : null,
    deadTuplesAfter: deliveries.dead,
    statements: statementCount,
    statementsPerUnit: per(statementCount),
    serverCpuUsPerUnit:
      before.serverCpuMs === undefined || after.serverCpuMs === undefined
        ? null
        : per((after.serverCpuMs - before.serverCpuMs) * 1000),
  };
}

/** Merge the statement tables of several processes. */
export function mergeStatements(
  parts: readonly Record<string, { count: number; ms: number }>[],
): Record<string, { count: number; ms: number }> {
  const out: Record<string, { count: number; ms: number }> = {};
  for (const part of parts) {
    for (const [name, s] of Object.entries(part)) {
      const entry = (out[name] ??= { count: 0, ms: 0 });
      entry.count += s.count;
      entry.ms += s.ms;
    }
  }
  return out;
}

/** The statements that took the most client-side wall time, with their share. */
export function profile(
  statements: Record<string, { count: number; ms: number }>,
  top = 6,
): { name: string; count: number; ms: number; msPerCall: number; share: number }[] {
  const total = Object.values(statements).reduce((sum, s) => sum + s.ms, 0) || 1;
  return Object.entries(statements)
    .map(([name, s]) => ({
      name,
      count: s.count,
      ms: Math.round(s.ms),
      msPerCall: s.count ? s.ms / s.count : 0,
      share: s.ms / total,
    }))
    .sort((a, b) => b.ms - a.ms)
    .slice(0, top);
}
