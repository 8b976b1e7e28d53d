import type {
  CancelParams,
  CancelResult,
  PauseHandlerParams,
  PausedHandler,
  ResumeHandlerParams,
  HandlerStatistics,
  LaneView,
  ListDeliveriesParams,
  DeliveryView,
  Page,
  PurgeParams,
  PurgeResult,
  RequeueParams,
  Statistics,
  SubscribeOptions,
  Subscription,
  SubscriptionView,
  UnsubscribeParams,
  UnsubscribeResult,
} from '../store/contract.js';
import { withTotals } from '../store/statistics.js';
import {
  assertOptionalDate,
  unsubscribeRefusal,
  validateCancel,
  validateList,
  validatePauseHandler,
  validateResumeHandler,
  validatePurge,
  validateRequeue,
  validateSubscriptions,
  validateUnsubscribe,
} from '../store/validate.js';
import type { RowOf } from './rows.js';
import type { StoreContext } from './store-context.js';

/**
 * The Postgres store's statements off the delivery path: subscriptions, lanes and deliveries listed, requeue of dead
 * deliveries, cancel of pending ones, statistics and purge. Each runs one statement on the pool.
 */

const iso = (date: Date | undefined): string | null => (date === undefined ? null : date.toISOString());
/** A timestamp as the drivers hand it back (a Date, or its text), or as milliseconds since the epoch. */
const toDate = (value: unknown): Date =>
  value instanceof Date ? value : new Date(typeof value === 'number' ? value : String(value));
const toInt = (value: unknown): number => Number(value);

// Row types come from the column descriptions of rows.ts, which a test checks against what Postgres describes.
type DeliveryRow = RowOf<'list-deliveries'>;
type SubscriptionRow = RowOf<'list-subscriptions'>;
type StatisticsRow = RowOf<'statistics'>;

function toView(row: DeliveryRow): DeliveryView {
  return {
    id: row.id,
    eventId: row.event_id,
    eventType: row.event_type,
    handler: row.handler,
    key: row.key,
    sequence: row.sequence,
    lane: toInt(row.lane),
    status: row.status,
    attempts: toInt(row.attempts),
    maxAttempts: toInt(row.max_attempts),
    availableAt: toDate(row.available_at),
    lastError: row.last_error,
    createdAt: toDate(row.created_at),
    updatedAt: toDate(row.updated_at),
    // Headers are an object whenever the payload was read (a payload may be JSON null itself).
    ...(row.headers === null ? {} : { payload: row.payload, headers: row.headers }),
  };
}

export async function subscribe(
  context: StoreContext,
  subscriptions: readonly Subscription[],
  options?: SubscribeOptions,
): Promise<void> {
  const retries = validateSubscriptions(subscriptions, options);
  if (subscriptions.length === 0) return;
  await context.runOwned('subscribe', [
    subscriptions.map((s) => s.eventType),
    subscriptions.map((s) => s.handler),
    subscriptions.map((s) => s.maxAttempts),
    retries,
    iso(options?.now),
    options?.seen ?? true,
  ]);
}

export async function listLanes(context: StoreContext): Promise<LaneView[]> {
  const rows = await context.runOwned<RowOf<'list-lanes'>>('list-lanes', []);
  return rows.map((row) => ({
    lane: toInt(row.lane),
    owner: row.owner,
    epoch: row.epoch,
    leaseExpiresAt: toDate(row.lease_expires_at),
    inFlight: toInt(row.in_flight),
  }));
}

export async function listSubscriptions(context: StoreContext): Promise<SubscriptionView[]> {
  const rows = await context.runOwned<SubscriptionRow>('list-subscriptions', []);
  return rows.map((row) => ({
    eventType: row.event_type,
    handler: row.handler,
    maxAttempts: toInt(row.max_attempts),
    retry: row.retry,
    createdAt: toDate(row.created_at),
    updatedAt: toDate(row.updated_at),
    seenAt: row.seen_at === null ? null : toDate(row.seen_at),
    pending: toInt(row.pending),
  }));
}

export async function unsubscribe(context: StoreContext, params: UnsubscribeParams): Promise<UnsubscribeResult> {
  validateUnsubscribe(params);
  const [row] = await context.runOwned<RowOf<'unsubscribe'>>('unsubscribe', [
    params.handler,
    params.eventType ?? null,
    params.buryPending ?? null,
    iso(params.now),
  ]);
  const refused = unsubscribeRefusal(params, toInt(row!.pending), toInt(row!.in_flight));
  if (refused !== undefined) throw refused;
  return { removed: toInt(row!.removed), buried: toInt(row!.buried) };
}

export async function requeue(context: StoreContext, params: RequeueParams): Promise<number> {
  validateRequeue(params);
  const rows = await context.runOwned('requeue', [
    params.deliveryIds ? [...params.deliveryIds] : null,
    params.handler ?? null,
    params.eventId ?? null,
    iso(params.now),
  ]);
  return rows.length;
}

export async function cancel(context: StoreContext, params: CancelParams): Promise<CancelResult> {
  validateCancel(params);
  const rows = await context.runOwned<RowOf<'cancel'>>('cancel', [params.eventId, params.handler ?? null]);
  return {
    found: rows.length > 0,
    deliveries: rows.map((row) => ({ deliveryId: row.id, handler: row.handler, outcome: row.outcome })),
  };
}

export async function pauseHandler(context: StoreContext, params: PauseHandlerParams): Promise<boolean> {
  validatePauseHandler(params);
  const rows = await context.runOwned<RowOf<'pause-handler'>>('pause-handler', [
    params.handler,
    params.reason ?? null,
    iso(params.now),
  ]);
  return rows.length > 0;
}

export async function resumeHandler(context: StoreContext, params: ResumeHandlerParams): Promise<boolean> {
  validateResumeHandler(params);
  const rows = await context.runOwned<RowOf<'resume-handler'>>('resume-handler', [params.handler, context.channel]);
  return rows.length > 0;
}

export async function listPausedHandlers(context: StoreContext): Promise<PausedHandler[]> {
  const rows = await context.runOwned<RowOf<'list-paused-handlers'>>('list-paused-handlers', []);
  return rows.map((row) => ({ handler: row.handler, pausedAt: toDate(row.paused_at), reason: row.reason }));
}

export async function listDeliveries(
  context: StoreContext,
  params: ListDeliveriesParams = {},
): Promise<Page<DeliveryView>> {
  const { limit, cursor } = validateList(params);
  const rows = await context.runOwned<DeliveryRow>('list-deliveries', [
    params.status ?? null,
    params.handler ?? null,
    params.eventId ?? null,
    params.key ?? null,
    cursor,
    limit + 1,
    params.withPayload ?? false,
  ]);
  const items = rows.slice(0, limit).map(toView);
  return { items, nextCursor: rows.length > limit ? items[items.length - 1]!.id : null };
}

export async function statistics(context: StoreContext, now?: Date): Promise<Statistics> {
  assertOptionalDate(now, 'now');
  const at = now ?? new Date();
  const rows = await context.runOwned<StatisticsRow>('statistics', [iso(now)]);
  const handlers: Record<string, HandlerStatistics> = {};
  let lanesLeased = 0;
  for (const row of rows) {
    if (row.handler === null) {
      lanesLeased = toInt(row.lanes_leased);
      continue;
    }
    const oldest = row.oldest_due_at === null ? null : toDate(row.oldest_due_at).getTime();
    handlers[row.handler] = {
      pending: toInt(row.pending),
      due: toInt(row.due),
      scheduled: toInt(row.scheduled),
      inFlight: toInt(row.in_flight),
      dead: toInt(row.dead),
      completed: toInt(row.completed),
      oldestDueAgeMs: oldest === null ? null : Math.max(0, at.getTime() - oldest),
    };
  }
  return withTotals(handlers, lanesLeased);
}

export async function purgeExpired(context: StoreContext, params: PurgeParams): Promise<PurgeResult> {
  validatePurge(params);
  const [row] = await context.runOwned<RowOf<'purge-expired'>>('purge-expired', [
    params.completedRetentionMs,
    params.deadRetentionMs,
    iso(params.now),
  ]);
  return { events: toInt(row?.events), deadDeliveries: toInt(row?.dead_deliveries), history: toInt(row?.history) };
}
