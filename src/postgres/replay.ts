import { InvalidInputError, InvalidStateError } from '../core/errors.js';
import { LIVE_WAIT_IDS } from '../core/limits.js';
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
import { assertReplayId, validateListReplays, validateReplay, validateReplayStep } from '../store/validate-replay.js';
import type { RowOf } from './rows.js';
import type { SqlExecutor } from './sql-client.js';
import type { StoreContext } from './store-context.js';

/**
 * The Postgres store's replays (sql/admin/replay-*.sql): plan, start, step, cancel, get and list. A start and a step
 * each run in one transaction of their own statements; the rest are one statement each.
 */

type ReplayRow = RowOf<'replay-list'>;
type TakenRow = RowOf<'replay-take'>;

const iso = (date: Date | undefined): string | null => (date === undefined ? null : date.toISOString());
const toDate = (value: Date | string): Date => (value instanceof Date ? value : new Date(value));

/** The selection parameters $1-$8 of the statements that plan (sql/fragments/replay-selection.sql). */
function selection(mode: string, handlers: readonly string[], filter: ReplayFilter): unknown[] {
  return [
    mode,
    [...handlers],
    filter.eventTypes === undefined ? null : [...filter.eventTypes],
    iso(filter.since),
    iso(filter.until),
    filter.fromEventId ?? null,
    filter.toEventId ?? null,
    filter.key ?? null,
  ];
}

/** The filter as the audit record keeps it (dates as ISO text), without the selectors not given. */
function filterOf(params: ReplayFilter): Record<string, unknown> {
  const kept: Record<string, unknown> = {
    eventTypes: params.eventTypes === undefined ? undefined : [...params.eventTypes],
    since: iso(params.since) ?? undefined,
    until: iso(params.until) ?? undefined,
    fromEventId: params.fromEventId,
    toEventId: params.toEventId,
    key: params.key,
  };
  return Object.fromEntries(Object.entries(kept).filter(([, value]) => value !== undefined));
}

/** The kept filter read back: the selectors it has, dates as Dates. */
function filterFrom(stored: Record<string, unknown>): ReplayFilter {
  const filter: { -readonly [K in keyof ReplayFilter]: ReplayFilter[K] } = {};
  if (Array.isArray(stored.eventTypes)) filter.eventTypes = stored.eventTypes as string[];
  if (typeof stored.since === 'string') filter.since = new Date(stored.since);
  if (typeof stored.until === 'string') filter.until = new Date(stored.until);
  if (typeof stored.fromEventId === 'string') filter.fromEventId = stored.fromEventId;
  if (typeof stored.toEventId === 'string') filter.toEventId = stored.toEventId;
  if (typeof stored.key === 'string') filter.key = stored.key;
  return filter;
}

function toView(row: ReplayRow): ReplayView {
  return {
    id: row.id,
    mode: row.mode,
    handlers: row.handlers,
    filter: filterFrom(row.filter),
    requestedBy: row.requested_by,
    reason: row.reason,
    state: row.state,
    createdAt: toDate(row.created_at),
    updatedAt: toDate(row.updated_at),
    finishedAt: row.finished_at === null ? null : toDate(row.finished_at),
    total: Number(row.total),
    created: Number(row.created),
    skipped: Number(row.skipped),
  };
}

function unsubscribedError(handler: string, eventType: string): InvalidStateError {
  return new InvalidStateError(
    `Handler "${handler}" has no active subscription to event type "${eventType}": its worker would not run the ` +
      'replayed deliveries; nothing was replayed. Start a worker that runs it (or run relaybus setup --subscriptions).',
  );
}

export async function planReplay(context: StoreContext, params: ReplayParams): Promise<ReplayPlan> {
  validateReplay(params);
  const rows = await context.runOwned<RowOf<'replay-plan'>>(
    'replay-plan',
    selection(params.mode, params.handlers, params),
  );
  const deliveries: Record<string, number> = {};
  for (const row of rows) {
    const [missing] = row.unsubscribed;
    if (missing !== undefined) throw unsubscribedError(row.handler, missing);
    deliveries[row.handler] = Number(row.deliveries);
  }
  return { mode: params.mode, events: Number(rows[0]?.events ?? 0), deliveries };
}

async function read(context: StoreContext, executor: SqlExecutor, replayId: string): Promise<ReplayView | null> {
  const [row] = await context.run<ReplayRow>(executor, 'replay-list', [replayId, null, 1]);
  return row === undefined ? null : toView(row);
}

export async function startReplay(context: StoreContext, params: ReplayParams): Promise<ReplayView> {
  validateReplay(params);
  return context.driver.transaction(async (tx) => {
    const executor = context.driver.unwrap(tx);
    await context.run(executor, 'replay-lock', []);
    const [row] = await context.run<RowOf<'replay-start'>>(executor, 'replay-start', [
      ...selection(params.mode, params.handlers, params),
      params.requestedBy ?? null,
      params.reason ?? null,
      JSON.stringify(filterOf(params)),
      iso(params.now),
    ]);
    if (row?.running != null)
      throw new InvalidStateError(
        `Replay ${row.running} is running for a handler of [${params.handlers.join(', ')}]: one replay at a time per ` +
          'handler (cancel it or let it finish); nothing was replayed.',
      );
    if (row?.unsubscribed_handler != null && row.unsubscribed_type != null)
      throw unsubscribedError(row.unsubscribed_handler, row.unsubscribed_type);
    await context.run(executor, 'replay-quiesce', []);
    const view = await read(context, executor, row!.id!);
    return view!;
  });
}

async function liveWaits(
  context: StoreContext,
  executor: SqlExecutor,
  replayId: string,
  now: string | null,
): Promise<LiveWait[]> {
  const rows = await context.run<RowOf<'replay-live-wait'>>(executor, 'replay-live-wait', [
    replayId,
    LIVE_WAIT_IDS,
    now,
  ]);
  return rows.map((row) => ({ handler: row.handler, ms: row.waited_ms }));
}

async function outstanding(context: StoreContext, executor: SqlExecutor, replayId: string): Promise<number> {
  const [row] = await context.run<RowOf<'replay-outstanding'>>(executor, 'replay-outstanding', [replayId]);
  return Number(row?.outstanding ?? 0);
}

/** What a step did once the replay's row is locked: deliveries created, or why it waits. */
async function advance(
  context: StoreContext,
  executor: SqlExecutor,
  replayId: string,
  taken: TakenRow,
  limit: number,
  now: string | null,
): Promise<{ created: number; waiting?: 'in-flight' | 'draining' }> {
  const [busy] = await context.run<RowOf<'replay-in-flight'>>(executor, 'replay-in-flight', [replayId, taken.handlers]);
  if (Number(busy?.in_flight ?? 0) > 0) return { created: 0, waiting: 'in-flight' };
  if (BigInt(taken.cursor) >= BigInt(taken.planned)) {
    if (!taken.settled || (await outstanding(context, executor, replayId)) > 0)
      return { created: 0, waiting: 'draining' };
    const filter = filterFrom(taken.filter);
    const [late] = await context.run<RowOf<'replay-late-plan'>>(executor, 'replay-late-plan', [
      ...selection(taken.mode, taken.handlers, filter),
      taken.mode === 'backfill',
      replayId,
      now,
    ]);
    if (late?.finished !== false) return { created: 0 };
  }
  if (taken.mode === 'redrive') await context.run(executor, 'replay-no-jit', []);
  const [step] = await context.run<RowOf<'replay-step'>>(executor, 'replay-step', [
    replayId,
    taken.cursor,
    limit,
    taken.mode,
    now,
    context.channel,
  ]);
  return { created: Number(step?.created ?? 0) };
}

export async function replayStep(context: StoreContext, params: ReplayStepParams): Promise<ReplayStepResult> {
  const limit = validateReplayStep(params);
  const now = iso(params.now);
  return context.driver.transaction(async (tx) => {
    const executor = context.driver.unwrap(tx);
    const [taken] = await context.run<TakenRow>(executor, 'replay-take', [params.replayId]);
    if (taken === undefined) throw new InvalidInputError(`No replay has id ${params.replayId}.`);
    const done =
      taken.state === 'running' && limit > 0
        ? await advance(context, executor, params.replayId, taken, limit, now)
        : { created: 0 };
    const replay = (await read(context, executor, params.replayId))!;
    return {
      replay,
      created: done.created,
      ...(done.waiting === undefined ? {} : { waiting: done.waiting }),
      outstanding: await outstanding(context, executor, params.replayId),
      liveWaits: await liveWaits(context, executor, params.replayId, now),
    };
  });
}

export async function cancelReplay(context: StoreContext, replayId: string, now?: Date): Promise<ReplayView | null> {
  assertReplayId(replayId);
  assertOptionalDate(now, 'now');
  await context.runOwned('replay-cancel', [replayId, iso(now)]);
  return getReplay(context, replayId);
}

export async function getReplay(context: StoreContext, replayId: string): Promise<ReplayView | null> {
  assertReplayId(replayId);
  return read(context, context.driver.executor, replayId);
}

export async function listReplays(context: StoreContext, params?: ListReplaysParams): Promise<ReplayView[]> {
  const limit = validateListReplays(params);
  const rows = await context.runOwned<ReplayRow>('replay-list', [null, params?.state ?? null, limit]);
  return rows.map(toView);
}
