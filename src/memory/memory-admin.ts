import type {
  DeliveryStatus,
  DeliveryView,
  HandlerStatistics,
  LaneView,
  ListDeliveriesParams,
  Page,
  PurgeParams,
  PurgeResult,
  RequeueParams,
  CancelParams,
  CancelResult,
  CancelledDelivery,
  PauseHandlerParams,
  PausedHandler,
  ResumeHandlerParams,
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
import {
  compareIds,
  compareSequences,
  compareText,
  emptyHandlerStatistics,
  jsonEqual,
  timeOf,
  type DeliveryRecord,
  type MemoryState,
  type MutableHandlerStatistics,
  type SubscriptionRecord,
} from './memory-state.js';

/** The memory store off the delivery path: subscriptions, lanes and deliveries listed, requeue, statistics, purge. */
export class MemoryAdmin {
  constructor(readonly data: MemoryState) {}

  // ----- subscriptions -----------------------------------------------------------------------

  async subscribe(subscriptions: readonly Subscription[], options?: SubscribeOptions): Promise<void> {
    this.data.assertOpen();
    validateSubscriptions(subscriptions, options);
    const at = timeOf(options?.now);
    const seen = options?.seen ?? true;
    for (const { eventType, handler, maxAttempts, retry } of subscriptions) {
      const byHandler = this.data.subscriptions.get(eventType) ?? new Map<string, SubscriptionRecord>();
      this.data.subscriptions.set(eventType, byHandler);
      const stored = byHandler.get(handler);
      const description = retry ?? null;
      if (stored === undefined) {
        byHandler.set(handler, {
          maxAttempts,
          retry: description,
          createdAt: at,
          updatedAt: at,
          seenAt: seen ? at : null,
        });
        continue;
      }
      if (stored.maxAttempts !== maxAttempts || !jsonEqual(stored.retry, description)) stored.updatedAt = at;
      stored.maxAttempts = maxAttempts;
      stored.retry = description;
      if (seen) stored.seenAt = at;
    }
  }

  async listLanes(): Promise<LaneView[]> {
    this.data.assertOpen();
    const views: LaneView[] = [];
    this.data.lanes.forEach((record, lane) => {
      if (record.owner === null) return;
      let inFlight = 0;
      for (const id of record.inFlight) if (this.data.deliveries.get(id)?.status === 'pending') inFlight += 1;
      views.push({
        lane,
        owner: record.owner,
        epoch: record.epoch.toString(),
        leaseExpiresAt: new Date(record.leaseExpiresAt ?? 0),
        inFlight,
      });
    });
    return views;
  }

  async listSubscriptions(): Promise<SubscriptionView[]> {
    this.data.assertOpen();
    const pending = new Map<string, number>();
    for (const d of this.data.deliveries.values()) {
      if (d.status !== 'pending') continue;
      const k = JSON.stringify([d.eventType, d.handler]);
      pending.set(k, (pending.get(k) ?? 0) + 1);
    }
    return [...this.data.subscriptions]
      .sort(([a], [b]) => compareText(a, b))
      .flatMap(([eventType, byHandler]) =>
        [...byHandler]
          .sort(([a], [b]) => compareText(a, b))
          .map(([handler, s]) => ({
            eventType,
            handler,
            maxAttempts: s.maxAttempts,
            retry: s.retry,
            createdAt: new Date(s.createdAt),
            updatedAt: new Date(s.updatedAt),
            seenAt: s.seenAt === null ? null : new Date(s.seenAt),
            pending: pending.get(JSON.stringify([eventType, handler])) ?? 0,
          })),
      );
  }

  async unsubscribe(params: UnsubscribeParams): Promise<UnsubscribeResult> {
    this.data.assertOpen();
    validateUnsubscribe(params);
    const at = timeOf(params.now);
    const pending = [...this.data.deliveries.values()].filter(
      (d) =>
        d.status === 'pending' &&
        d.handler === params.handler &&
        (params.eventType === undefined || d.eventType === params.eventType),
    );
    const inFlight = pending.filter((d) => this.data.lanes[d.lane]!.inFlight.has(d.id)).length;
    const refused = unsubscribeRefusal(params, pending.length, inFlight);
    if (refused !== undefined) throw refused;
    for (const d of pending) {
      d.status = 'dead';
      d.lastError = params.buryPending!;
      d.claims += 1;
      d.updatedAt = at;
    }
    let removed = 0;
    for (const [eventType, byHandler] of this.data.subscriptions) {
      if (params.eventType !== undefined && eventType !== params.eventType) continue;
      if (byHandler.delete(params.handler)) removed += 1;
      if (byHandler.size === 0) this.data.subscriptions.delete(eventType);
    }
    return { removed, buried: pending.length };
  }

  // ----- admin -------------------------------------------------------------------------------

  async requeue(params: RequeueParams): Promise<number> {
    this.data.assertOpen();
    validateRequeue(params);
    const now = timeOf(params.now);
    const ids = params.deliveryIds ? new Set(params.deliveryIds) : null;
    const selected = [...this.data.deliveries.values()]
      .filter((d) => d.status === 'dead')
      .filter(
        (d) =>
          (ids === null || ids.has(d.id)) &&
          (params.handler === undefined || d.handler === params.handler) &&
          (params.eventId === undefined || d.eventId === params.eventId),
      )
      // Requeued deliveries of one key keep their relative order at the back of the key.
      .sort((a, b) => compareSequences(a.sequence, b.sequence) || compareIds(a.id, b.id));
    for (const delivery of selected) {
      delivery.status = 'pending';
      delivery.attempts = 0;
      delivery.claims += 1;
      delivery.availableAt = now;
      delivery.updatedAt = now;
      if (delivery.key !== null) delivery.sequence = this.data.nextSequence(delivery.key);
    }
    return selected.length;
  }

  async cancel(params: CancelParams): Promise<CancelResult> {
    this.data.assertOpen();
    validateCancel(params);
    const targets = [...this.data.deliveries.values()]
      .filter((d) => d.eventId === params.eventId && (params.handler === undefined || d.handler === params.handler))
      .sort((a, b) => compareIds(a.id, b.id));
    // One synchronous pass: no claim can interleave, so each delivery either is in flight (it runs) or is deleted.
    const deliveries: CancelledDelivery[] = targets.map((d) => {
      const outcome =
        d.status === 'dead' ? 'dead' : this.data.lanes[d.lane]!.inFlight.has(d.id) ? 'running' : 'cancelled';
      if (outcome === 'cancelled') this.data.deliveries.delete(d.id);
      return { deliveryId: d.id, handler: d.handler, outcome };
    });
    const withDelivery = new Set(targets.map((d) => d.handler));
    for (const handler of this.data.events.get(params.eventId)?.handlers ?? [])
      if ((params.handler === undefined || handler === params.handler) && !withDelivery.has(handler))
        deliveries.push({ deliveryId: null, handler, outcome: 'finished' });
    return { found: deliveries.length > 0, deliveries };
  }

  // ----- paused handlers ---------------------------------------------------------------------

  async pauseHandler(params: PauseHandlerParams): Promise<boolean> {
    this.data.assertOpen();
    validatePauseHandler(params);
    if (this.data.pausedHandlers.has(params.handler)) return false;
    this.data.pausedHandlers.set(params.handler, { pausedAt: timeOf(params.now), reason: params.reason ?? null });
    return true;
  }

  async resumeHandler(params: ResumeHandlerParams): Promise<boolean> {
    this.data.assertOpen();
    validateResumeHandler(params);
    return this.data.pausedHandlers.delete(params.handler);
  }

  async listPausedHandlers(): Promise<PausedHandler[]> {
    this.data.assertOpen();
    return [...this.data.pausedHandlers.entries()]
      .sort(([a], [b]) => compareText(a, b))
      .map(([handler, { pausedAt, reason }]) => ({ handler, pausedAt: new Date(pausedAt), reason }));
  }

  async listDeliveries(params: ListDeliveriesParams = {}): Promise<Page<DeliveryView>> {
    this.data.assertOpen();
    const { limit, cursor } = validateList(params);
    const views = this.#allViews(params.status)
      .filter(
        (v) =>
          (params.status === undefined || v.status === params.status) &&
          (params.handler === undefined || v.handler === params.handler) &&
          (params.eventId === undefined || v.eventId === params.eventId) &&
          (params.key === undefined || v.key === params.key) &&
          (cursor === null || compareIds(v.id, cursor) > 0),
      )
      .sort((a, b) => compareIds(a.id, b.id));
    const items = views.slice(0, limit);
    const nextCursor = views.length > limit ? items[items.length - 1]!.id : null;
    return { items: params.withPayload ? items.map((view) => this.#withPayload(view)) : items, nextCursor };
  }

  /** The view with its event's payload and headers, while the event is kept. */
  #withPayload(view: DeliveryView): DeliveryView {
    const event = this.data.events.get(view.eventId);
    if (event === undefined) return view;
    return { ...view, payload: JSON.parse(event.payloadJson) as unknown, headers: { ...event.headers } };
  }

  #allViews(status: DeliveryStatus | undefined): DeliveryView[] {
    const views = [...this.data.deliveries.values()].map((d) => this.#view(d, this.#statusOf(d)));
    if (status === undefined || status === 'completed') {
      for (const entry of this.data.history) views.push(this.#view(entry.delivery, 'completed'));
    }
    return views;
  }

  #statusOf(delivery: DeliveryRecord): DeliveryStatus {
    if (delivery.status === 'dead') return 'dead';
    return this.data.lanes[delivery.lane]!.inFlight.has(delivery.id) ? 'processing' : 'pending';
  }

  #view(d: DeliveryRecord, status: DeliveryStatus): DeliveryView {
    return {
      id: d.id,
      eventId: d.eventId,
      eventType: d.eventType,
      handler: d.handler,
      key: d.key,
      sequence: d.sequence?.toString() ?? null,
      lane: d.lane,
      status,
      attempts: d.attempts,
      maxAttempts: d.maxAttempts,
      availableAt: new Date(d.availableAt),
      lastError: d.lastError,
      createdAt: new Date(d.createdAt),
      updatedAt: new Date(d.updatedAt),
    };
  }

  async statistics(now?: Date): Promise<Statistics> {
    this.data.assertOpen();
    assertOptionalDate(now, 'now');
    const at = timeOf(now);
    const perHandler = new Map<string, MutableHandlerStatistics>();
    const statsOf = (handler: string) => {
      let stats = perHandler.get(handler);
      if (!stats) perHandler.set(handler, (stats = emptyHandlerStatistics()));
      return stats;
    };
    for (const d of this.data.deliveries.values()) {
      const stats = statsOf(d.handler);
      const status = this.#statusOf(d);
      if (status === 'dead') stats.dead += 1;
      else if (status === 'processing') stats.inFlight += 1;
      else if (d.availableAt <= at) {
        stats.due += 1;
        stats.oldestDueAgeMs = Math.max(stats.oldestDueAgeMs ?? 0, at - d.availableAt);
      } else stats.scheduled += 1;
    }
    for (const entry of this.data.history) statsOf(entry.delivery.handler).completed += 1;
    const handlers: Record<string, HandlerStatistics> = {};
    for (const [name, stats] of [...perHandler.entries()].sort(([a], [b]) => a.localeCompare(b))) {
      stats.pending = stats.due + stats.scheduled;
      handlers[name] = stats;
    }
    const lanesLeased = this.data.lanes.filter((l) => l.owner !== null && (l.leaseExpiresAt ?? 0) > at).length;
    return withTotals(handlers, lanesLeased);
  }

  async purgeExpired(params: PurgeParams): Promise<PurgeResult> {
    this.data.assertOpen();
    validatePurge(params);
    const now = timeOf(params.now);
    const deadBefore = now - params.deadRetentionMs;
    const completedBefore = now - params.completedRetentionMs;

    let deadDeliveries = 0;
    for (const d of [...this.data.deliveries.values()]) {
      if (d.status === 'dead' && d.updatedAt < deadBefore) {
        this.data.deliveries.delete(d.id);
        deadDeliveries += 1;
      }
    }
    const withDeliveries = new Set([...this.data.deliveries.values()].map((d) => d.eventId));
    let events = 0;
    for (const event of [...this.data.events.values()]) {
      if (event.createdAt < completedBefore && !withDeliveries.has(event.id)) {
        this.data.events.delete(event.id);
        events += 1;
      }
    }
    const kept = this.data.history.filter((entry) => entry.completedAt >= completedBefore);
    const history = this.data.history.length - kept.length;
    this.data.history.splice(0, this.data.history.length, ...kept);
    return { events, deadDeliveries, history };
  }
}
