/**
 * What the backfill benchmark's processes share (bench/backfill.ts, bench/lib/backfill-child.ts): the event, its two
 * handlers, the tuned dispatcher settings and a bus over a keepEvents Postgres store, loaded from dist/.
 */
import type pg from 'pg';
import type * as Api from '../../src/index.js';
import type * as PgApi from '../../src/postgres/index.js';

const dist = (path: string) => new URL(`../../dist/src/${path}`, import.meta.url).href;

/** The handlers of the benchmark, by index in the records: h1 = 0, indexer = 1. */
export const BACKFILL_HANDLERS = ['h1', 'indexer'] as const;
export type BackfillHandler = (typeof BACKFILL_HANDLERS)[number];

/** The event every process publishes and handles: `{ i }`, keyed `k<i mod keys>`. */
export const EVENT_TYPE = 'bench.backfill';

/** relaybus tuned (bench/contenders/relaybus.ts): the settings of the dispatch cell. */
export const TUNED = {
  concurrency: 1000,
  batchSize: 500,
  pollIntervalMs: 50,
  poolSize: 20,
  claimLoops: 2,
  followers: 9,
} as const;

export interface BackfillInit {
  readonly type: 'init';
  readonly role: 'dispatcher' | 'publisher';
  readonly url: string;
  readonly schema: string;
  /** Dispatcher: the handlers it runs. Publisher: the handlers its events fan out to. */
  readonly handlers: readonly BackfillHandler[];
}

/** Publisher: `ratePerSec` events/s, one per transaction, for `durationMs`; event n is i = firstI + n, key i mod keys. */
export interface BackfillPublishPlan {
  readonly firstI: number;
  readonly keys: number;
  readonly ratePerSec: number;
  readonly durationMs: number;
}

export interface BackfillPublisherResult {
  readonly type: 'result';
  /** Event indexes committed, in commit order, and when each commit returned (ms on the machine clock, `machineNow`). */
  readonly commitI: Int32Array;
  readonly commitT: Float64Array;
  readonly startedAt: number;
  readonly endedAt: number;
  readonly error?: string;
}

export interface BackfillDispatcherResult {
  readonly type: 'result';
  /** Every handler start, in the order this process started them: event, handler index, machine-clock ms. */
  readonly records: { i: Int32Array; h: Uint8Array; t: Float64Array };
  readonly cpuMs: number;
  readonly warnings: readonly string[];
  readonly error?: string;
}

export const keyOfEvent = (i: number, keys: number): string => `k${i % keys}`;

/** relaybus from dist/ (types from src/). */
export async function loadRelaybus(): Promise<{ api: typeof Api; pgApi: typeof PgApi }> {
  return {
    api: (await import(dist('index.js'))) as typeof Api,
    pgApi: (await import(dist('postgres/index.js'))) as typeof PgApi,
  };
}

/** A bus over a keepEvents Postgres store with `handlers` registered (each calls `onHandle(i, index)`). */
export async function backfillBus(
  pool: pg.Pool,
  schema: string,
  handlers: readonly BackfillHandler[],
  onHandle: (i: number, handler: number) => void,
  logger?: Api.Logger,
) {
  const { api, pgApi } = await loadRelaybus();
  const Event = api.defineEvent(EVENT_TYPE, api.Type.Object({ i: api.Type.Integer() }));
  const store = pgApi.postgresStore({ driver: pgApi.fromPg(pool), schema, keepEvents: true });
  const bus = api.createRelayBus({
    store,
    events: [Event],
    setupStore: false,
    ...(logger ? { logger } : {}),
    dispatcher: {
      concurrency: TUNED.concurrency,
      batchSize: TUNED.batchSize,
      pollIntervalMs: TUNED.pollIntervalMs,
      claimLoops: TUNED.claimLoops,
      followers: TUNED.followers,
    },
  });
  for (const name of handlers) {
    const index = BACKFILL_HANDLERS.indexOf(name);
    bus.on(Event, name, (payload) => onHandle(payload.i, index));
  }
  return { api, store, bus, Event };
}
