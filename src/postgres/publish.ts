import { randomUUID } from 'node:crypto';
import { EventConflictError, InvalidInputError, StoreUnavailableError } from '../core/errors.js';
import { laneOf, LANE_COUNT } from '../core/lanes.js';
import type { PublishParams, PublishResult } from '../store/contract.js';
import { noHandlersError, validatePublish } from '../store/validate.js';
import type { RowOf } from './rows.js';
import type { PostgresDriver } from './sql-client.js';
import type { StoreContext } from './store-context.js';

/**
 * Publish on the Postgres store. It runs `publish-guard` (pipelined with the next statement) and `publish-new-one`
 * (one event, plain parameters) or `publish-new` (a batch, as typed arrays), which write only when every id is new,
 * every event has a handler (its own or a subscription) and the guard's marker shows a transaction block, and then,
 * only when an id exists already, `publish` (inbox dedup and conflict check) for the whole batch. Publish never runs a
 * statement that fails on bad input: a refusal leaves the caller's transaction usable.
 */

const iso = (date: Date | undefined): string | null => (date === undefined ? null : date.toISOString());

/** The value `publish-guard` sets in the caller's transaction and the publish statements look for. */
const GUARD_MARKER = 'on';

/**
 * The most characters of JSON (payload and headers) an event may have to be published inline: without an events row,
 * carried by each of its deliveries. Below Postgres's TOAST threshold (about 2 kB a row), so a delivery stays one
 * heap tuple; a larger event is written once, in its events row.
 */
const INLINE_EVENT_LIMIT = 1_500;

/** A publish-new row: an event it inserted (with its handlers), or (handlers null) why it wrote nothing. */
type LeanRow = RowOf<'publish-new' | 'publish-new-one'>;

type FullRow = RowOf<'publish'>;

/** What a publish statement did for one event: its result, whether it inserted the event, whether it raced. */
interface Published extends PublishResult {
  /** Inserted by this call (not an existing event that only got handlers). */
  readonly inserted: boolean;
  /** Its id was inserted by a concurrent transaction while the statement ran: nothing was decided for it yet. */
  readonly raced: boolean;
}

/** The results of the full publish statement, after its refusals (no transaction, no handler, a conflict) threw. */
function fullResults(rows: readonly FullRow[], events: readonly PublishParams[]): Published[] {
  if (rows.some((row) => row.no_transaction)) throw notInTransaction();
  const unserved = rows.find((row) => row.no_handlers);
  if (unserved !== undefined) throw noHandlersError(events[unserved.ord - 1]!, unserved.ord - 1);
  if (rows.some((row) => row.conflict !== null)) throw conflictError(rows, events);
  return rows.map((row) => ({
    eventId: row.id,
    addedHandlers: row.added,
    duplicate: row.duplicate,
    inserted: !row.duplicate,
    raced: row.raced,
  }));
}

function notInTransaction(): InvalidInputError {
  return new InvalidInputError(
    'publish() got a transaction that is not in a transaction block (it ended, or never began), so nothing was written. ' +
      'Publish inside the transaction callback, before it returns.',
  );
}

const quote = (value: string | null): string =>
  value === null ? 'null' : JSON.stringify(value.length > 60 ? `${value.slice(0, 60)}...` : value);

/** The conflict error of the first conflicting row (all of them are named in the message). */
function conflictError(rows: readonly FullRow[], events: readonly PublishParams[]): EventConflictError {
  const conflicting = rows.filter((row) => row.conflict !== null);
  const [first] = conflicting;
  const event = events[first!.ord - 1]!;
  const parts = first!.conflict!.map((field) =>
    field === 'type'
      ? `type ${quote(first!.stored_type)} was published again as ${quote(event.type)}`
      : field === 'key'
        ? `key ${quote(first!.stored_key)} was published again as ${quote(event.key ?? null)}`
        : 'the payload differs',
  );
  const others =
    conflicting.length > 1
      ? ` (and ${conflicting.length - 1} more event id(s) of this call: ${conflicting
          .slice(1, 6)
          .map((r) => quote(r.id))
          .join(', ')})`
      : '';
  return new EventConflictError(
    `Event id ${quote(first!.id)} is taken by a different event: ${parts.join('; ')}${others}. An event id names one event; ` +
      'publish a different event under a new id. Nothing was written; your transaction is still usable.',
    first!.id,
    first!.conflict!,
  );
}

/** The lanes a publish named in its NOTIFY payload (`3,17,200`); undefined for an empty or foreign payload. */
export function lanesOfPayload(payload: string): number[] | undefined {
  if (payload === '') return undefined;
  const lanes = payload.split(',').map(Number);
  return lanes.every((lane) => Number.isInteger(lane) && lane >= 0 && lane < LANE_COUNT) ? lanes : undefined;
}

/** The parameters of publish-new and publish: one array per column, the process's handlers flattened per event. */
function publishArrays(
  events: readonly PublishParams[],
  ids: readonly string[],
  payloads: readonly string[],
  headers: readonly string[],
): unknown[] {
  const handlerOrd: number[] = [];
  const handlerName: string[] = [];
  const handlerAttempts: number[] = [];
  events.forEach((event, index) => {
    for (const handler of event.handlers) {
      handlerOrd.push(index + 1);
      handlerName.push(handler.name);
      handlerAttempts.push(handler.maxAttempts);
    }
  });
  return [
    ids,
    events.map((event) => event.type),
    events.map((event) => event.key ?? null),
    payloads,
    headers,
    events.map((event, index) => laneOf(event.key, ids[index]!)),
    events.map((event) => iso(event.availableAt)),
    handlerOrd,
    handlerName,
    handlerAttempts,
  ];
}

/** Write `events` in the caller's transaction `tx` (unwrapped by `driver` once the events are valid); see `Store.publish`. */
export async function publish<TTx>(
  context: StoreContext,
  driver: PostgresDriver<TTx>,
  tx: TTx,
  events: readonly PublishParams[],
  now?: Date,
): Promise<PublishResult[]> {
  const payloads = validatePublish(events, now);
  if (events.length === 0) return [];
  const executor = driver.unwrap(tx);
  const { run, inlineEvents, channel, publishProbe } = context;
  await publishProbe.check(executor, (on, params) => run(on, 'publish-probe', params));
  const ids = events.map((event) => event.id ?? randomUUID());
  // Outside a transaction block (a transaction object used after it ended) a statement would autocommit. No
  // single statement can tell, so a guard statement sets a transaction-local marker first, pipelined where the
  // driver allows, and the publish statements write only where they see it. Nothing ever fails: the caller's
  // transaction stays usable.
  const guard = executor.transactionChecked === true ? null : GUARD_MARKER;
  // The common case, every id new, takes one statement (publish-new). It returns the events it inserted, or one row
  // saying why it wrote nothing (an id exists already, an event has no handler, or no transaction).
  // The arrays of publish-new and publish, built once and only when a statement needs them (not for one new event).
  const headers = events.map((event) => JSON.stringify(event.headers ?? {}));
  let arrays: unknown[] | undefined;
  const params = () => (arrays ??= [...publishArrays(events, ids, payloads, headers), guard, iso(now), channel]);
  const inline = events.map(
    (event, i) =>
      inlineEvents && event.id === undefined && payloads[i]!.length + headers[i]!.length <= INLINE_EVENT_LIMIT,
  );
  const [first] = events;
  const lean = () =>
    events.length === 1
      ? run<LeanRow>(executor, 'publish-new-one', [
          ids[0],
          first!.type,
          first!.key ?? null,
          payloads[0],
          headers[0],
          first!.handlers.map((h) => h.name),
          first!.handlers.map((h) => h.maxAttempts),
          laneOf(first!.key, ids[0]!),
          iso(first!.availableAt),
          guard,
          iso(now),
          channel,
          inline[0],
        ])
      : run<LeanRow>(executor, 'publish-new', [...params(), inline]);
  let rows: LeanRow[];
  if (guard === null) {
    rows = await lean();
  } else {
    [, rows] = await Promise.all([run(executor, 'publish-guard', []), lean()]);
    // A driver may run the two in either order: ask once more, after the guard has run, before refusing.
    if (rows.some((row) => row.refused === 'no-transaction')) rows = await lean();
    if (rows.some((row) => row.refused === 'no-transaction')) throw notInTransaction();
  }
  const unserved = rows.find((row) => row.refused === 'no-handlers');
  if (unserved !== undefined) throw noHandlersError(events[unserved.ord - 1]!, unserved.ord - 1);
  // An id exists, or (no row at all) a concurrent transaction inserted the one new id first and nothing was
  // written: the full statement (inbox dedup, conflict check) runs for the whole batch, in the same transaction.
  let results: Published[];
  if (rows.length === 0 || rows.some((row) => row.refused === 'exists')) {
    results = fullResults(await run<FullRow>(executor, 'publish', params()), events);
  } else {
    // An event without a row was not inserted: a concurrent transaction inserted its id first.
    const added = new Map<number, string[]>(rows.map((row) => [Number(row.ord), row.handlers ?? []]));
    results = ids.map((eventId, index) => {
      const handlers = added.get(index + 1);
      return handlers === undefined
        ? { eventId, addedHandlers: [], duplicate: true, raced: true, inserted: false }
        : { eventId, addedHandlers: handlers, duplicate: false, raced: false, inserted: true };
    });
  }
  const raced = results.flatMap((result, index) => (result.raced ? [index] : []));
  if (raced.length > 0) {
    // Publish the raced events again: their ids are committed now, so the full statement sees them (inbox dedup,
    // or a conflict). On a conflict, take back everything this call wrote and throw: a batch writes all or nothing.
    const pick = <T>(values: readonly T[]) => raced.map((index) => values[index]!);
    const subset = pick(events);
    const again = await run<FullRow>(executor, 'publish', [
      ...publishArrays(subset, pick(ids), pick(payloads), pick(headers)),
      guard,
      iso(now),
      channel,
    ]);
    if (again.some((row) => row.conflict !== null)) {
      const added = results.flatMap((result, index) => result.addedHandlers.map((handler) => ({ index, handler })));
      await run(executor, 'publish-undo', [
        added.map(({ index }) => ids[index]),
        added.map(({ handler }) => handler),
        added.map(({ index }) => laneOf(events[index]!.key, ids[index]!)),
        added.map(({ index }) => events[index]!.key ?? null),
        results.flatMap((result) => (result.inserted ? [result.eventId] : [])),
      ]);
      throw conflictError(again, subset);
    }
    const settled = fullResults(again, subset);
    if (settled.some((result) => result.raced))
      throw new StoreUnavailableError(
        'An event id of this publish was inserted by a concurrent transaction twice in a row; nothing is decided for it. It is safe to retry.',
        { retryable: true },
      );
    raced.forEach((index, n) => {
      results[index] = settled[n]!;
    });
  }
  return results.map(({ eventId, addedHandlers, duplicate }) => ({ eventId, addedHandlers, duplicate }));
}
