/**
 * CPU time the database server has used, read from /proc when it runs on this machine (as in the bench): on a shared
 * 2-core machine throughput moves 10-15% between identical runs, while the server's CPU time per delivery moves far
 * less, and it says what a library costs the database beside what it costs its own process.
 *
 * The postmaster's own time plus that of its exited children (cutime/cstime: Linux adds a child's time to its
 * parent's when the parent reaps it, and the postmaster reaps every backend), plus that of each live child (backends,
 * WAL writer, checkpointer, autovacuum). A backend that exits between two readings is counted once, in whichever
 * reading it falls under; one still running in both is counted by its own fields.
 */
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import type pg from 'pg';

/** Clock ticks per second of /proc's time fields. */
const TICKS_PER_SECOND = (() => {
  try {
    return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
  } catch {
    return 100;
  }
})();

interface ProcStat {
  /** The command name (stat's 2nd field). */
  readonly name: string;
  readonly ppid: number;
  /** utime + stime, in ticks. */
  readonly own: number;
  /** cutime + cstime: the reaped children's, in ticks. */
  readonly children: number;
}

/** One process's /proc/<pid>/stat, or undefined when it is gone or unreadable. */
function procStat(pid: number): ProcStat | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command name is in parentheses and may hold spaces: the fields start after the last ')'.
  const close = text.lastIndexOf(')');
  const fields = text.slice(close + 2).split(' ');
  // fields[0] is stat's 3rd field (state): ppid is the 4th, utime..cstime the 14th to 17th.
  return {
    name: text.slice(text.indexOf('(') + 1, close),
    ppid: Number(fields[1]),
    own: Number(fields[11]) + Number(fields[12]),
    children: Number(fields[13]) + Number(fields[14]),
  };
}

/**
 * Milliseconds of CPU the server behind `client` has used so far; undefined when it does not run on this machine (its
 * backend is not in /proc) or /proc cannot be read.
 */
export async function serverCpuMs(client: pg.Client): Promise<number | undefined> {
  const {
    rows: [row],
  } = await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid');
  // A remote server's backend pid may name some local process: both must be Postgres's.
  const backend = procStat(row!.pid);
  if (backend?.name !== 'postgres') return undefined;
  const postmaster = backend.ppid;
  const root = procStat(postmaster);
  if (root?.name !== 'postgres') return undefined;
  let ticks = root.own + root.children;
  let entries: string[];
  try {
    entries = readdirSync('/proc');
  } catch {
    return undefined;
  }
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = procStat(Number(entry));
    if (stat?.ppid === postmaster) ticks += stat.own;
  }
  return (ticks * 1000) / TICKS_PER_SECOND;
}
