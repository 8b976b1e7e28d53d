/**
 * Client-side statement accounting. pg_stat_statements needs `shared_preload_libraries` (a server
 * restart), which a shared benchmark machine does not get, so every child process counts the
 * statements it sends instead: `pg.Client.prototype.query` is wrapped once, before any pool is made,
 * and every contender (relaybus, pg-boss and graphile-worker all use this copy of `pg`) goes through
 * it. BEGIN and COMMIT count as statements: they are round trips too. Per-statement wall time
 * (send to result) is kept for the profile: named statements by name, others by their first words.
 */
import pg from 'pg';

export interface StatementStat {
  count: number;
  ms: number;
}

const stats = new Map<string, StatementStat>();
let installed = false;

function labelOf(arg: unknown): string {
  if (typeof arg === 'string') return arg.replace(/\s+/g, ' ').trim().slice(0, 60);
  if (typeof arg === 'object' && arg !== null) {
    const config = arg as { name?: unknown; text?: unknown };
    if (typeof config.name === 'string' && config.name.length > 0) return config.name;
    if (typeof config.text === 'string') return config.text.replace(/\s+/g, ' ').trim().slice(0, 60);
  }
  return 'other';
}

export function installStatementCounter(): void {
  if (installed) return;
  installed = true;
  const proto = pg.Client.prototype as unknown as { query: (...args: unknown[]) => unknown };
  const original = proto.query;
  proto.query = function patchedQuery(this: unknown, ...args: unknown[]): unknown {
    const label = labelOf(args[0]);
    const entry = stats.get(label) ?? { count: 0, ms: 0 };
    stats.set(label, entry);
    entry.count += 1;
    const started = performance.now();
    const done = () => {
      entry.ms += performance.now() - started;
    };
    // pg.Pool calls client.query(config, values, callback); direct callers get a promise.
    const last = args.length - 1;
    if (typeof args[last] === 'function') {
      const callback = args[last] as (...results: unknown[]) => unknown;
      args[last] = (...results: unknown[]) => {
        done();
        return callback(...results);
      };
    }
    const result = original.apply(this, args);
    if (result !== null && typeof result === 'object' && typeof (result as Promise<unknown>).then === 'function') {
      (result as Promise<unknown>).then(done, done);
    }
    return result;
  };
}

/** Counts since the last reset. */
export function statementStats(): Record<string, StatementStat> {
  return Object.fromEntries(stats);
}

export function resetStatementStats(): void {
  stats.clear();
}
