import type {
  BuryParams,
  ClaimSession,
  ClaimSessionOptions,
  CompleteManyResult,
  DeliveryLease,
  DeliveryView,
  ExtendLeaseParams,
  ExtendLeaseResult,
  LaneView,
  ListDeliveriesParams,
  Page,
  PublishParams,
  PublishResult,
  PurgeParams,
  PurgeResult,
  RequeueParams,
  CancelParams,
  CancelResult,
  PauseHandlerParams,
  PausedHandler,
  ReplayParams,
  ReplayPlan,
  ReplayView,
  ReplayStepParams,
  ReplayStepResult,
  ListReplaysParams,
  LiveWait,
  ResumeHandlerParams,
  RescheduleParams,
  Statistics,
  Store,
  StoreCapabilities,
  SubscribeOptions,
  Subscription,
  SubscriptionView,
  UnsubscribeParams,
  UnsubscribeResult,
} from '../store/contract.js';
import { validateClaimSession } from '../store/validate.js';
import * as admin from './admin.js';
import * as replay from './replay.js';
import * as fencedWrites from './fenced-writes.js';
import { reportLiveLag, subscribeLiveLag } from './live-lag.js';
import { PgClaimSession } from './pg-claim-session.js';
import { lanesOfPayload, publish } from './publish.js';
import { setupPostgres } from './setup.js';
import type { PostgresDriver } from './sql-client.js';
import { createStoreContext, toStoreError, type PostgresStoreOptions, type StoreContext } from './store-context.js';

export type { PostgresStoreOptions } from './store-context.js';
export { lanesOfPayload } from './publish.js';

/**
 * The Postgres store, written once against `PostgresDriver` for every driver. Each contract method runs the
 * statements of `sql/` (one file each); a few run more than one. The work is in modules over one shared
 * `StoreContext` (store-context.ts: options, statements, errors): publish.ts, the claim sessions
 * (pg-claim-session.ts, one claim a `ClaimCycle` in claim-cycle.ts), fenced-writes.ts and admin.ts. This class is
 * the contract's face: each method says which module does the work.
 */

/** A Postgres store: the lane-lease delivery path over one schema. */
export interface PostgresStore<TTx> extends Store<TTx> {
  readonly kind: 'postgres';
  /** The Postgres schema the tables live in. */
  readonly schema: string;
  /**
   * Subscribe to dropped-connection errors the driver kept from crashing the process (for logging;
   * the statement in progress has failed already). Returns the unsubscribe function; a no-op for
   * drivers that never emit them (postgres.js, PGlite).
   */
  onConnectionError(listener: (error: Error) => void): () => void;
  /** A NOTIFY on the schema's lag channel (nothing without `notify`). */
  reportLiveLag(waits: readonly LiveWait[]): Promise<void>;
  /**
   * LISTENs on the schema's lag channel on a connection of its own: a no-op without `notify`, a driver that listens, or
   * a pool of at least two connections.
   */
  subscribeLiveLag(onReport: (waits: readonly LiveWait[]) => void): Promise<() => Promise<void>>;
}

class PgStore<TTx> implements PostgresStore<TTx> {
  readonly kind = 'postgres' as const;
  readonly schema: string;
  readonly capabilities: StoreCapabilities;
  readonly #context: StoreContext;
  /** The driver, typed by the caller's transaction (the context's is the same, untyped). */
  readonly #driver: PostgresDriver<TTx>;

  constructor(context: StoreContext, driver: PostgresDriver<TTx>) {
    this.#context = context;
    this.#driver = driver;
    this.schema = context.schema;
    this.capabilities = Object.freeze({
      transactions: true,
      completionHistory: context.history,
      wakeups: context.listens ? 'listen-notify' : 'poll',
      concurrentConnections: context.driver.concurrentConnections,
    });
  }

  async subscribeWakeups(onWake: (lanes?: readonly number[]) => void): Promise<() => Promise<void>> {
    const { driver, listens, channel } = this.#context;
    if (!listens || driver.listen === undefined) return async () => {};
    return driver.listen(channel!, (payload) => onWake(lanesOfPayload(payload)));
  }

  async setup(): Promise<void> {
    const { driver, schema, statements, publishProbe } = this.#context;
    try {
      await setupPostgres(driver, schema, statements);
      publishProbe.markFound();
    } catch (error) {
      throw toStoreError(error, 'setup', schema);
    }
  }

  /** publish.ts */
  publish(tx: TTx, events: readonly PublishParams[], now?: Date): Promise<PublishResult[]> {
    return publish(this.#context, this.#driver, tx, events, now);
  }

  /** A claim session of `owner` (pg-claim-session.ts). */
  openClaims(owner: string, options?: ClaimSessionOptions): ClaimSession {
    validateClaimSession(owner, options);
    return new PgClaimSession(this.#context, owner, options);
  }

  // fenced-writes.ts

  extendLease(params: ExtendLeaseParams): Promise<ExtendLeaseResult> {
    return fencedWrites.extendLease(this.#context, params);
  }

  completeMany(leases: readonly DeliveryLease[], now?: Date): Promise<boolean[]> {
    return fencedWrites.completeMany(this.#context, leases, now);
  }

  completeManyReportingNext(leases: readonly DeliveryLease[], now?: Date): Promise<CompleteManyResult> {
    return fencedWrites.completeManyReportingNext(this.#context, leases, now);
  }

  complete(lease: DeliveryLease, tx: TTx, now?: Date): Promise<boolean> {
    return fencedWrites.complete(this.#context, this.#driver, tx, lease, now);
  }

  reschedule(lease: DeliveryLease, params: RescheduleParams): Promise<boolean> {
    return fencedWrites.reschedule(this.#context, lease, params);
  }

  bury(lease: DeliveryLease, params: BuryParams): Promise<boolean> {
    return fencedWrites.bury(this.#context, lease, params);
  }

  release(leases: readonly DeliveryLease[], now?: Date): Promise<boolean[]> {
    return fencedWrites.release(this.#context, leases, now);
  }

  // admin.ts

  subscribe(subscriptions: readonly Subscription[], options?: SubscribeOptions): Promise<void> {
    return admin.subscribe(this.#context, subscriptions, options);
  }

  listLanes(): Promise<LaneView[]> {
    return admin.listLanes(this.#context);
  }

  listSubscriptions(): Promise<SubscriptionView[]> {
    return admin.listSubscriptions(this.#context);
  }

  unsubscribe(params: UnsubscribeParams): Promise<UnsubscribeResult> {
    return admin.unsubscribe(this.#context, params);
  }

  requeue(params: RequeueParams): Promise<number> {
    return admin.requeue(this.#context, params);
  }

  cancel(params: CancelParams): Promise<CancelResult> {
    return admin.cancel(this.#context, params);
  }

  pauseHandler(params: PauseHandlerParams): Promise<boolean> {
    return admin.pauseHandler(this.#context, params);
  }

  resumeHandler(params: ResumeHandlerParams): Promise<boolean> {
    return admin.resumeHandler(this.#context, params);
  }

  listPausedHandlers(): Promise<PausedHandler[]> {
    return admin.listPausedHandlers(this.#context);
  }

  planReplay(params: ReplayParams): Promise<ReplayPlan> {
    return replay.planReplay(this.#context, params);
  }

  startReplay(params: ReplayParams): Promise<ReplayView> {
    return replay.startReplay(this.#context, params);
  }

  replayStep(params: ReplayStepParams): Promise<ReplayStepResult> {
    return replay.replayStep(this.#context, params);
  }

  // live-lag.ts

  reportLiveLag(waits: readonly LiveWait[]): Promise<void> {
    return reportLiveLag(this.#context, waits);
  }

  subscribeLiveLag(onReport: (waits: readonly LiveWait[]) => void): Promise<() => Promise<void>> {
    return subscribeLiveLag(this.#context, onReport);
  }

  cancelReplay(replayId: string, now?: Date): Promise<ReplayView | null> {
    return replay.cancelReplay(this.#context, replayId, now);
  }

  getReplay(replayId: string): Promise<ReplayView | null> {
    return replay.getReplay(this.#context, replayId);
  }

  listReplays(params?: ListReplaysParams): Promise<ReplayView[]> {
    return replay.listReplays(this.#context, params);
  }

  listDeliveries(params?: ListDeliveriesParams): Promise<Page<DeliveryView>> {
    return admin.listDeliveries(this.#context, params);
  }

  statistics(now?: Date): Promise<Statistics> {
    return admin.statistics(this.#context, now);
  }

  purgeExpired(params: PurgeParams): Promise<PurgeResult> {
    return admin.purgeExpired(this.#context, params);
  }

  async transaction<T>(fn: (tx: TTx) => Promise<T>): Promise<T> {
    let thrown: { error: unknown } | undefined;
    try {
      return await this.#driver.transaction(async (tx) => {
        try {
          return await fn(tx);
        } catch (error) {
          thrown = { error };
          throw error;
        }
      });
    } catch (error) {
      // What the caller's fn threw is theirs, as it is; a driver error (opening, committing) is classified like any.
      if (thrown !== undefined && error === thrown.error) throw error;
      throw toStoreError(error, 'transaction', this.schema);
    }
  }

  onConnectionError(listener: (error: Error) => void): () => void {
    return this.#context.driver.onConnectionError?.(listener) ?? (() => {});
  }

  async close(): Promise<void> {
    await this.#context.held.releaseAll();
    await this.#context.statistics.settled();
    await this.#context.driver.close();
  }
}

/**
 * Create the Postgres store.
 *
 * ```ts
 * import pg from 'pg';
 * import { postgresStore, fromPg } from 'relaybus/postgres';
 * const store = postgresStore({ driver: fromPg(new pg.Pool({ connectionString: process.env.DATABASE_URL })) });
 * await store.setup();
 * ```
 */
export function postgresStore<TTx>(options: PostgresStoreOptions<TTx>): PostgresStore<TTx> {
  return new PgStore<TTx>(createStoreContext(options), options.driver);
}
