/**
 * The contenders by name, loaded on demand: a child process imports only the contender it runs
 * (pg-boss and graphile-worker are large modules; loading them in every child slows start-up).
 */
import type { Contender } from '../lib/types.js';

/** A URL with a query is a module instance of its own: the relaybus contender over RELAYBUS_BASE_DIST. */
const BASE_INSTANCE = new URL('./relaybus.js?base', import.meta.url).href;

const LOADERS: Readonly<Record<string, () => Promise<Contender>>> = {
  relaybus: async () => (await import('./relaybus.js')).relaybus,
  // Another build of relaybus (RELAYBUS_BASE_DIST), for before/after pairs: a second instance of the same module.
  'relaybus-base': async () => ((await import(BASE_INSTANCE)) as typeof import('./relaybus.js')).relaybus,
  'row-lease': async () => (await import('./row-lease.js')).rowLease,
  'pg-boss': async () => (await import('./pg-boss.js')).pgBoss,
  'pg-boss-10': async () => (await import('./pg-boss.js')).pgBoss10,
  'graphile-worker': async () => (await import('./graphile-worker.js')).graphileWorker,
  'graphile-worker-0.17': async () => (await import('./graphile-worker.js')).graphileWorker017,
  'raw-sql': async () => (await import('./raw-sql.js')).rawSql,
  'raw-fanout': async () => (await import('./raw-fanout.js')).rawFanout,
};

export const CONTENDER_NAMES: readonly string[] = Object.keys(LOADERS);

export async function loadContender(name: string): Promise<Contender> {
  const loader = LOADERS[name];
  if (!loader) throw new Error(`unknown contender ${name}; known: ${CONTENDER_NAMES.join(', ')}`);
  return loader();
}
