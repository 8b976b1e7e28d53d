import { InvalidInputError, InvalidStateError } from '../core/errors.js';
import { echo, LIVE_WAIT_IDS } from '../core/limits.js';
import { laneOf } from '../core/lanes.js';
import type {
  ListReplaysParams,
  LiveWait,
  ReplayFilter,
  ReplayParams,
  ReplayPlan,
  ReplayStepParams,
  ReplayStepResult,
  ReplayView,
} from '../store/contract.js';
import { assertOptionalDate } from '../store/validate.js';
import {
  assertReplayId,
  validateListReplays,
  validateLiveWaits,
  validateReplay,
  validateReplayStep,
} from '../store/validate-replay.js';
import {
  compareIds,
  compareText,
  timeOf,
  type DeliveryRecord,
  type EventRecord,
  type MemoryState,
  type ReplayItem,
  type ReplayRecord,
} from './memory-state.js';

type Types = ReadonlyMap<string, ReadonlySet<string>>;

/** Handlers a step's `liveWaits` lists at most (as sql/admin/replay-live-wait.sql). */
const MAX_LIVE_WAITS = 16;

/** Replay order: the event's key-order value (unkeyed last), then publish time, then id. */
function byReplayOrder(a: EventRecord, b: EventRecord): number {
  if (a.sequence !== b.sequence) {
    if (a.sequence === null) return 1;
    if (b.sequence === null) return -1;
    return a.sequence < b.sequence ? -1 : 1;
  }
  return a.createdAt - b.createdAt || compareText(a.id, b.id);
}

/** The filter as the audit record keeps it: the selectors given, copied. */
function filterOf(params: ReplayParams): ReplayFilter {
  return {
    ...(params.eventTypes === undefined ? {} : { eventTypes: [...params.eventTypes] }),
    ...(params.since === undefined ? {} : { since: new Date(params.since.getTime()) }),
    ...(params.until === undefined ? {} : { until: new Date(params.until.getTime()) }),
    ...(params.fromEventId === undefined ? {} : { fromEventId: params.fromEventId }),
    ...(params.toEventId === undefined ? {} : { toEventId: params.toEventId }),
    ...(params.key === undefined ? {} : { key: params.key }),
  };
}

function selected(event: EventRecord, filter: ReplayFilter): boolean {
  return (
    (filter.since === undefined || event.createdAt >= filter.since.getTime()) &&
    (filter.until === undefined || event.createdAt < filter.until.getTime()) &&
    (filter.fromEventId === undefined || event.id >= filter.fromEventId) &&
    (filter.toEventId === undefined || event.id <= filter.toEventId) &&
    (filter.key === undefined || event.key === filter.key)
  );
}

/**
 * Replay on the memory store: the plan is fixed at the start (events in key order, each with the handlers it lacks,
 * or had), steps create its deliveries in that order, and while it runs its handlers' live keyed deliveries wait
 * (`ReplayHold`, applied by the claims).
 */
export class MemoryReplay {
  /** Who hears the workers' live lag reports (`subscribeLiveLag`): in process, as the memory store's workers are. */
  readonly #lagListeners = new Set<(waits: readonly LiveWait[]) => void>();

  constructor(readonly data: MemoryState) {}

  async reportLiveLag(waits: readonly LiveWait[]): Promise<void> {
    this.data.assertOpen();
    validateLiveWaits(waits);
    for (const listener of [...this.#lagListeners]) listener(waits);
  }

  async subscribeLiveLag(onReport: (waits: readonly LiveWait[]) => void): Promise<() => Promise<void>> {
    // A wrapper, so subscribing the same function twice gives two subscriptions, each unsubscribed on its own.
    const listener = (waits: readonly LiveWait[]): void => onReport(waits);
    this.#lagListeners.add(listener);
    return async () => {
      this.#lagListeners.delete(listener);
    };
  }

  async planReplay(params: ReplayParams): Promise<ReplayPlan> {
    this.data.assertOpen();
    validateReplay(params);
    const types = this.#types(params);
    const events = this.#select(params, types);
    const present = this.#present();
    const deliveries: Record<string, number> = Object.fromEntries(params.handlers.map((h) => [h, 0]));
    for (const event of events)
      for (const handler of this.#itemHandlers(params.mode, params.handlers, types, event, present))
        deliveries[handler]! += 1;
    return { mode: params.mode, events: events.length, deliveries };
  }

  async startReplay(params: ReplayParams): Promise<ReplayView> {
    this.data.assertOpen();
    validateReplay(params);
    const now = timeOf(params.now);
    for (const replay of this.data.replays.values()) {
      if (replay.state !== 'running') continue;
      const busy = params.handlers.find((h) => replay.handlers.includes(h));
      if (busy !== undefined)
        throw new InvalidStateError(
          `Handler ${echo(busy)} already has a running replay (id ${replay.id}); cancel it or let it finish first. ` +
            'Nothing was started.',
        );
    }
    const types = this.#types(params);
    const plan = this.#planItems(params.mode, params.handlers, types, this.#select(params, types));
    const id = this.data.nextReplayId.toString();
    this.data.nextReplayId += 1n;
    const replay: ReplayRecord = {
      id,
      mode: params.mode,
      handlers: [...params.handlers],
      filter: filterOf(params),
      requestedBy: params.requestedBy ?? null,
      reason: params.reason ?? null,
      state: 'running',
      createdAt: now,
      updatedAt: now,
      finishedAt: null,
      total: plan.reduce((sum, item) => sum + item.handlers.length, 0),
      created: 0,
      skipped: 0,
      types,
      plan,
      cursor: 0,
      openAtStart: new Set(this.data.openTransactions),
      keyOrderAtStart: new Map(this.data.keySequences),
    };
    this.data.replays.set(id, replay);
    return this.#view(replay);
  }

  async replayStep(params: ReplayStepParams): Promise<ReplayStepResult> {
    this.data.assertOpen();
    const limit = validateReplayStep(params);
    const now = timeOf(params.now);
    const replay = this.data.replays.get(params.replayId);
    if (replay === undefined)
      throw new InvalidInputError(`No replay has id ${echo(params.replayId)}; listReplays() shows the replays.`);
    if (replay.state !== 'running') return this.#result(replay, now, 0);
    if (this.#olderKeyedInFlight(replay)) return this.#result(replay, now, 0, 'in-flight');
    if (replay.cursor >= replay.plan.length) {
      if (limit === 0 || !this.#drained(replay)) return this.#result(replay, now, 0, 'draining');
      // A publish that committed after the start may lack the handler: a backfill looks once more.
      const late = replay.mode === 'backfill' ? this.#latePlan(replay) : [];
      if (late.length === 0) {
        replay.state = 'finished';
        replay.finishedAt = now;
        replay.updatedAt = now;
        return this.#result(replay, now, 0);
      }
      replay.plan.push(...late);
      replay.total += late.reduce((sum, item) => sum + item.handlers.length, 0);
    }
    if (limit === 0) return this.#result(replay, now, 0);
    const taken = replay.plan.slice(replay.cursor, replay.cursor + limit);
    const present = replay.mode === 'redrive' ? this.#present() : new Map<string, Set<string>>();
    let created = 0;
    for (const item of taken)
      for (const handler of item.handlers) {
        if (this.#create(replay, item, handler, present, now)) created += 1;
        else replay.skipped += 1;
      }
    replay.cursor += taken.length;
    replay.created += created;
    replay.updatedAt = now;
    return this.#result(replay, now, created);
  }

  async cancelReplay(replayId: string, now?: Date): Promise<ReplayView | null> {
    this.data.assertOpen();
    assertReplayId(replayId);
    assertOptionalDate(now, 'now');
    const replay = this.data.replays.get(replayId);
    if (replay === undefined) return null;
    if (replay.state === 'running') {
      replay.state = 'cancelled';
      replay.updatedAt = timeOf(now);
    }
    return this.#view(replay);
  }

  async getReplay(replayId: string): Promise<ReplayView | null> {
    this.data.assertOpen();
    assertReplayId(replayId);
    const replay = this.data.replays.get(replayId);
    return replay === undefined ? null : this.#view(replay);
  }

  async listReplays(params?: ListReplaysParams): Promise<ReplayView[]> {
    this.data.assertOpen();
    const limit = validateListReplays(params);
    return [...this.data.replays.values()]
      .filter((r) => params?.state === undefined || r.state === params.state)
      .sort((a, b) => compareIds(b.id, a.id))
      .slice(0, limit)
      .map((r) => this.#view(r));
  }

  // ----- planning ----------------------------------------------------------------------------

  /** The types each handler is replayed: those named (each must be subscribed), else every type it subscribes to. */
  #types(params: ReplayParams): Types {
    const types = new Map<string, ReadonlySet<string>>();
    for (const handler of params.handlers) {
      const subscribed = new Set<string>();
      for (const [eventType, byHandler] of this.data.subscriptions)
        if (byHandler.has(handler)) subscribed.add(eventType);
      for (const eventType of params.eventTypes ?? [])
        if (!subscribed.has(eventType))
          throw new InvalidStateError(
            `Handler ${echo(handler)} does not subscribe to ${echo(eventType)}: its worker would not run the replayed ` +
              'deliveries. Start the worker (or relaybus setup --subscriptions) first; nothing was replayed.',
          );
      types.set(handler, params.eventTypes === undefined ? subscribed : new Set(params.eventTypes));
    }
    return types;
  }

  /** The selected events some handler takes the type of, in replay order. */
  #select(filter: ReplayFilter, types: Types): EventRecord[] {
    const wanted = new Set([...types.values()].flatMap((set) => [...set]));
    return [...this.data.events.values()]
      .filter((event) => wanted.has(event.type) && selected(event, filter))
      .sort(byReplayOrder);
  }

  #planItems(
    mode: ReplayParams['mode'],
    handlers: readonly string[],
    types: Types,
    events: EventRecord[],
  ): ReplayItem[] {
    const present = this.#present();
    return events
      .map((event) => ({
        eventId: event.id,
        handlers: this.#itemHandlers(mode, handlers, types, event, present),
        sequence: event.sequence,
      }))
      .filter((item) => item.handlers.length > 0);
  }

  /** The handlers an event is replayed to: a backfill's lack it, a re-drive's had it and hold no delivery of it now. */
  #itemHandlers(
    mode: ReplayParams['mode'],
    handlers: readonly string[],
    types: Types,
    event: EventRecord,
    present: ReadonlyMap<string, ReadonlySet<string>>,
  ): string[] {
    return handlers.filter(
      (handler) => types.get(handler)?.has(event.type) === true && this.#wanted(mode, event, handler, present),
    );
  }

  #wanted(
    mode: ReplayParams['mode'],
    event: EventRecord,
    handler: string,
    present: ReadonlyMap<string, ReadonlySet<string>>,
  ): boolean {
    const had = event.handlers.includes(handler);
    return mode === 'backfill' ? !had : had && present.get(event.id)?.has(handler) !== true;
  }

  /** The selected events that still lack a handler after the planned ones are done. */
  #latePlan(replay: ReplayRecord): ReplayItem[] {
    return this.#planItems('backfill', replay.handlers, replay.types, this.#select(replay.filter, replay.types));
  }

  /** Event id -> handlers with a delivery of it now (pending or dead). */
  #present(): Map<string, Set<string>> {
    const present = new Map<string, Set<string>>();
    for (const d of this.data.deliveries.values()) {
      const handlers = present.get(d.eventId) ?? new Set<string>();
      handlers.add(d.handler);
      present.set(d.eventId, handlers);
    }
    return present;
  }

  // ----- steps -------------------------------------------------------------------------------

  /** Create one planned delivery, unless the handler got one meanwhile (or no longer subscribes). */
  #create(
    replay: ReplayRecord,
    item: ReplayItem,
    handler: string,
    present: ReadonlyMap<string, ReadonlySet<string>>,
    now: number,
  ): boolean {
    const event = this.data.events.get(item.eventId);
    const subscription = event && this.data.subscriptions.get(event.type)?.get(handler);
    if (event === undefined || subscription === undefined || !this.#wanted(replay.mode, event, handler, present))
      return false;
    if (replay.mode === 'backfill') event.handlers.push(handler);
    const delivery: DeliveryRecord = {
      id: this.data.newDeliveryId(),
      eventId: event.id,
      eventType: event.type,
      handler,
      lane: laneOf(event.key, event.id),
      key: event.key,
      sequence: item.sequence,
      replayId: replay.id,
      status: 'pending',
      attempts: 0,
      maxAttempts: subscription.maxAttempts,
      claims: 0,
      availableAt: now,
      lastError: null,
      createdAt: now,
      updatedAt: now,
    };
    this.data.deliveries.set(delivery.id, delivery);
    return true;
  }

  /** A keyed delivery of the replay's handlers that it did not create is running: history must not overtake it. */
  #olderKeyedInFlight(replay: ReplayRecord): boolean {
    for (const lane of this.data.lanes)
      for (const id of lane.inFlight) {
        const d = this.data.deliveries.get(id);
        if (
          d?.status === 'pending' &&
          d.key !== null &&
          d.replayId !== replay.id &&
          replay.handlers.includes(d.handler)
        )
          return true;
      }
    return false;
  }

  /** Its deliveries are done and every transaction open at its start has ended. */
  #drained(replay: ReplayRecord): boolean {
    if (this.#outstanding(replay) > 0) return false;
    for (const tx of replay.openAtStart) if (this.data.openTransactions.has(tx)) return false;
    return true;
  }

  #outstanding(replay: ReplayRecord): number {
    let count = 0;
    for (const d of this.data.deliveries.values()) if (d.replayId === replay.id && d.status === 'pending') count += 1;
    return count;
  }

  #result(replay: ReplayRecord, now: number, created: number, waiting?: 'in-flight' | 'draining'): ReplayStepResult {
    return {
      replay: this.#view(replay),
      created,
      outstanding: this.#outstanding(replay),
      ...(waiting === undefined ? {} : { waiting }),
      liveWaits: this.#liveWaits(replay, now),
    };
  }

  /**
   * Per handler, its live delivery due the longest without starting, among the newest `LIVE_WAIT_IDS` deliveries, as
   * the Postgres store's (replay-live-wait): looked up by id, not a pass over every delivery at every step.
   */
  #liveWaits(replay: ReplayRecord, now: number): LiveWait[] {
    const longest = new Map<string, number>();
    for (const d of this.#newestDeliveries()) {
      if (d.status !== 'pending' || d.replayId !== null || d.availableAt > now) continue;
      if (replay.handlers.includes(d.handler) || this.data.pausedHandlers.has(d.handler)) continue;
      if (this.data.lanes[d.lane]!.inFlight.has(d.id)) continue;
      longest.set(d.handler, Math.max(longest.get(d.handler) ?? 0, now - d.availableAt));
    }
    return [...longest]
      .map(([handler, ms]) => ({ handler, ms }))
      .sort((a, b) => b.ms - a.ms || compareText(a.handler, b.handler))
      .slice(0, MAX_LIVE_WAITS);
  }

  /** The deliveries among the newest `LIVE_WAIT_IDS` ids: by id when there are more, else all of them. */
  *#newestDeliveries(): Generator<DeliveryRecord> {
    const { deliveries } = this.data;
    const after = this.data.nextDeliveryId - 1n - BigInt(LIVE_WAIT_IDS);
    if (deliveries.size <= LIVE_WAIT_IDS) {
      for (const d of deliveries.values()) if (BigInt(d.id) > after) yield d;
      return;
    }
    for (let id = this.data.nextDeliveryId - 1n; id > after && id > 0n; id -= 1n) {
      const d = deliveries.get(id.toString());
      if (d !== undefined) yield d;
    }
  }

  #view(r: ReplayRecord): ReplayView {
    return {
      id: r.id,
      mode: r.mode,
      handlers: [...r.handlers],
      filter: filterOf({ mode: r.mode, handlers: r.handlers, ...r.filter }),
      requestedBy: r.requestedBy,
      reason: r.reason,
      state: r.state,
      createdAt: new Date(r.createdAt),
      updatedAt: new Date(r.updatedAt),
      finishedAt: r.finishedAt === null ? null : new Date(r.finishedAt),
      total: r.total,
      created: r.created,
      skipped: r.skipped,
    };
  }
}
