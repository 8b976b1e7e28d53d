import { InvalidInputError, InvalidPayloadError, InvalidStateError } from '../core/errors.js';
import { parseLeaseToken, type LeaseTokenParts } from '../core/lease-token.js';
import { LANE_COUNT } from '../core/lanes.js';
import { echo, MAX_CLAIM_LOOPS, MAX_FOLLOWERS, MAX_RETRY_LOOKAHEAD_MS, nameProblem } from '../core/limits.js';
import type {
  BuryParams,
  ClaimParams,
  DeliveryLease,
  ExtendLeaseParams,
  ClaimSessionOptions,
  ListDeliveriesParams,
  PublishParams,
  PurgeParams,
  RequeueParams,
  CancelParams,
  PauseHandlerParams,
  ResumeHandlerParams,
  RescheduleParams,
  SubscribeOptions,
  Subscription,
  UnsubscribeParams,
} from './contract.js';

/**
 * Input checks shared by every store, so each throws the same typed error for the same bad input,
 * before anything is written. Postgres cannot store a NUL character (U+0000) in text or jsonb, nor
 * a lone surrogate (half of a UTF-16 pair) in jsonb: a statement carrying one fails and aborts the
 * caller's transaction (text gets U+FFFD from the driver instead, silently). Both are refused here,
 * with the field named, before any statement runs.
 */

function fail(message: string): never {
  throw new InvalidInputError(message);
}

/** Whether `text` holds a lone surrogate: half of a UTF-16 pair, which Postgres jsonb refuses. */
function hasLoneSurrogate(text: string): boolean {
  return !(text as string & { isWellFormed(): boolean }).isWellFormed();
}

/** Refuse a string with a NUL character or a lone surrogate, naming where it is. */
export function assertNoNul(value: string, what: string): void {
  const at = value.indexOf('\0');
  if (at !== -1) {
    fail(
      `${what} contains a NUL character (\\u0000) at index ${at}, which Postgres cannot store; nothing was written. Got ${echo(value)}.`,
    );
  }
  if (hasLoneSurrogate(value)) {
    fail(
      `${what} contains a lone surrogate (half of a UTF-16 pair), which Postgres cannot store; nothing was written. Got ${echo(value)}.`,
    );
  }
}

export function assertName(value: unknown, what: string): asserts value is string {
  const problem = nameProblem(value, what);
  if (problem !== undefined) fail(problem);
  assertNoNul(value as string, what);
}

export function assertPositiveInteger(
  value: unknown,
  what: string,
  max = Number.MAX_SAFE_INTEGER,
): asserts value is number {
  assertIntegerIn(value, what, 1, max);
}

/** An integer from `min` to `max`, else an error that names `what`, the range and the value. */
function assertIntegerIn(value: unknown, what: string, min: number, max: number): asserts value is number {
  if (!Number.isInteger(value) || (value as number) < min || (value as number) > max) {
    fail(`${what} must be an integer from ${min} to ${max}, got ${echo(value)}.`);
  }
}

/**
 * The instants a store accepts: years 1 to 9999, what Postgres reads back from the ISO text the store
 * sends (an extended year such as -000001 or +010000 fails the statement, and with it the caller's
 * transaction). JavaScript dates reach much further.
 */
const MIN_DATE_MS = Date.parse('0001-01-01T00:00:00.000Z');
const MAX_DATE_MS = Date.parse('9999-12-31T23:59:59.999Z');

export function assertDate(value: unknown, what: string): asserts value is Date {
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) {
    fail(`${what} must be a valid Date, got ${String(value)}.`);
  }
  if (value.getTime() < MIN_DATE_MS || value.getTime() > MAX_DATE_MS) {
    fail(`${what} must be between the years 1 and 9999, got ${value.toISOString()}.`);
  }
}

/** `what` is a valid Date, or absent (the optional `now` of most store methods: `assertOptionalDate(now, 'now')`). */
export function assertOptionalDate(value: unknown, what: string): void {
  if (value !== undefined) assertDate(value, what);
}

/** What in `text` jsonb cannot store: a NUL character or a lone surrogate; undefined when nothing. */
function unstorable(text: string): string | undefined {
  if (text.includes('\0')) return 'a NUL character (\\u0000)';
  if (hasLoneSurrogate(text)) return 'a lone surrogate (half of a UTF-16 pair)';
  return undefined;
}

/** The JSON pointer of the first string or object key under `value` that jsonb cannot store, and what it holds. */
function unstorablePath(value: unknown, path: string): { path: string; what: string } | undefined {
  if (typeof value === 'string') {
    const what = unstorable(value);
    return what === undefined ? undefined : { path, what };
  }
  if (typeof value !== 'object' || value === null) return undefined;
  for (const [key, inner] of Object.entries(value)) {
    const at = `${path}/${key.replace(/~/g, '~0').replace(/\//g, '~1')}`;
    const what = unstorable(key);
    if (what !== undefined) return { path: at, what };
    const found = unstorablePath(inner, at);
    if (found !== undefined) return found;
  }
  return undefined;
}

/**
 * Serialise a payload, rejecting what JSON cannot represent faithfully (undefined, functions, bigint,
 * cycles: InvalidInputError) and what Postgres jsonb cannot store (a NUL character or a lone
 * surrogate in any string or object key: InvalidPayloadError naming its JSON pointer).
 */
export function payloadToJson(payload: unknown, what = 'payload'): string {
  let text: string | undefined;
  let hasUnstorable = false;
  try {
    text = JSON.stringify(payload, (key, value: unknown) => {
      if (typeof value === 'bigint' || typeof value === 'function' || typeof value === 'symbol') {
        throw new TypeError(`a ${typeof value} is not JSON`);
      }
      if (typeof value === 'number' && !Number.isFinite(value)) throw new TypeError(`${value} is not JSON`);
      if (unstorable(key) !== undefined || (typeof value === 'string' && unstorable(value) !== undefined))
        hasUnstorable = true;
      return value;
    });
  } catch (error) {
    throw new InvalidInputError(
      `The ${what} is not JSON-serialisable (${(error as Error).message}). Publish plain JSON values.`,
      { cause: error },
    );
  }
  if (text === undefined) fail(`The ${what} is not JSON-serialisable (undefined). Publish plain JSON values.`);
  if (hasUnstorable) {
    // The serialised form is exactly what would be stored: find the path in it (toJSON and friends applied).
    const found = unstorablePath(JSON.parse(text), '') ?? { path: '', what: 'a NUL character (\\u0000)' };
    const { path } = found;
    const message = `contains ${found.what}, which Postgres jsonb cannot store`;
    // The pointer as text: a NUL or lone surrogate in a key shown escaped, so the message itself stays valid text.
    const shown = path.replace(
      /\0|[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g,
      (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
    );
    throw new InvalidPayloadError(
      `The ${what} ${path === '' ? 'itself' : `at ${shown}`} ${message}; nothing was written. Remove or replace the character.`,
      [{ path, message }],
    );
  }
  return text;
}

/**
 * The failure text to record with a delivery: NUL characters removed. The text comes from a
 * handler's error; refusing it would leave the delivery's outcome unrecordable for good.
 */
export function recordableError(error: string): string {
  return error.includes('\0') ? error.replaceAll('\0', '') : error;
}

/** Checks every event and returns each payload as JSON text, in input order. */
export function validatePublish(events: readonly PublishParams[], now: Date | undefined): string[] {
  if (!Array.isArray(events)) fail('publish() takes an array of events.');
  assertOptionalDate(now, 'now');
  const ids = new Set<string>();
  return events.map((event, index) => {
    const at = `events[${index}]`;
    if (typeof event !== 'object' || event === null) fail(`${at} must be an object.`);
    if (event.id !== undefined) {
      assertName(event.id, `${at}.id`);
      if (ids.has(event.id))
        fail(`${at}.id ${echo(event.id)} appears twice in one publish call; publish each event once.`);
      ids.add(event.id);
    }
    assertName(event.type, `${at}.type`);
    if (event.key !== undefined && event.key !== null) assertName(event.key, `${at}.key`);
    const payloadJson = payloadToJson(event.payload, `${at}.payload`);
    if (event.headers !== undefined) {
      if (typeof event.headers !== 'object' || event.headers === null || Array.isArray(event.headers))
        fail(`${at}.headers must be an object of strings.`);
      for (const [name, value] of Object.entries(event.headers)) {
        assertNoNul(name, `${at}.headers name ${echo(name)}`);
        if (typeof value !== 'string') fail(`${at}.headers.${name} must be a string.`);
        assertNoNul(value, `${at}.headers.${name}`);
      }
    }
    if (!Array.isArray(event.handlers))
      fail(`${at}.handlers must be an array (empty: the subscriptions alone decide).`);
    const names = new Set<string>();
    event.handlers.forEach((handler: PublishParams['handlers'][number], h: number) => {
      assertName(handler?.name, `${at}.handlers[${h}].name`);
      assertPositiveInteger(handler.maxAttempts, `${at}.handlers[${h}].maxAttempts`, 1_000_000);
      if (names.has(handler.name)) fail(`${at}.handlers lists ${echo(handler.name)} twice.`);
      names.add(handler.name);
    });
    assertOptionalDate(event.availableAt, `${at}.availableAt`);
    return payloadJson;
  });
}

/** `ClaimHints.freeLanes`'s values. */
const FREE_LANES: readonly unknown[] = ['skip', 'first', 'when-due'] satisfies NonNullable<ClaimParams['freeLanes']>[];

export function validateClaim(params: ClaimParams): void {
  if (typeof params !== 'object' || params === null)
    fail('claim() needs its params: handlers, limit, leaseDurationMs.');
  if (!Array.isArray(params.handlers) || params.handlers.length === 0) fail('claim() needs at least one handler name.');
  params.handlers.forEach((name, i) => assertName(name, `handlers[${i}]`));
  assertPositiveInteger(params.limit, 'limit', 10_000);
  assertPositiveInteger(params.leaseDurationMs, 'leaseDurationMs', 86_400_000);
  if (params.acquireWhenFull !== undefined && typeof params.acquireWhenFull !== 'boolean')
    fail(`acquireWhenFull must be a boolean, got ${echo(params.acquireWhenFull)}.`);
  if (params.freeLanes !== undefined && !FREE_LANES.includes(params.freeLanes))
    fail(`freeLanes must be 'skip', 'first' or 'when-due' (or absent), got ${echo(params.freeLanes)}.`);
  const prefer: unknown = params.preferLanes;
  if (
    prefer !== undefined &&
    (!Array.isArray(prefer) ||
      prefer.length > LANE_COUNT ||
      prefer.some((lane) => !Number.isInteger(lane) || lane < 0 || lane >= LANE_COUNT))
  )
    fail(`preferLanes must be at most ${LANE_COUNT} lane numbers from 0 to ${LANE_COUNT - 1}, got ${echo(prefer)}.`);
  if (params.retryLookaheadMs !== undefined)
    assertIntegerIn(params.retryLookaheadMs, 'retryLookaheadMs', 0, MAX_RETRY_LOOKAHEAD_MS);
  if (params.followers !== undefined) assertIntegerIn(params.followers, 'followers', 0, MAX_FOLLOWERS);
  assertOptionalDate(params.now, 'now');
}

/** `Store.openClaims(owner, options)`: the owner id and the session's options. */
export function validateClaimSession(owner: string, options: ClaimSessionOptions | undefined): void {
  assertName(owner, 'owner');
  if (options === undefined) return;
  if (typeof options !== 'object' || options === null)
    fail(`openClaims() options must be an object, got ${echo(options)}.`);
  if (options.holdConnection !== undefined && typeof options.holdConnection !== 'boolean')
    fail(`holdConnection must be a boolean, got ${echo(options.holdConnection)}.`);
  const siblings: unknown = options.siblingOwners;
  if (siblings !== undefined) {
    if (!Array.isArray(siblings) || siblings.length >= MAX_CLAIM_LOOPS)
      fail(`siblingOwners must be an array of at most ${MAX_CLAIM_LOOPS - 1} owner ids, got ${echo(siblings)}.`);
    siblings.forEach((sibling, i) => assertName(sibling, `siblingOwners[${i}]`));
  }
}

/** `ClaimSession.forgetInFlight(holding)`: the deliveries the worker holds. */
export function validateForgetInFlight(holding: readonly string[]): void {
  if (!Array.isArray(holding)) fail('forgetInFlight() needs a holding array of delivery ids.');
  for (const id of holding) assertDeliveryId(id, 'holding[]');
}

export function validateExtendLease(params: ExtendLeaseParams): void {
  assertName(params?.owner, 'owner');
  if (!Array.isArray(params.lanes)) fail('extendLease() needs a lanes array.');
  for (const held of params.lanes) parseLeaseToken(`${held?.lane}:${held?.epoch}:0`);
  assertPositiveInteger(params.leaseDurationMs, 'leaseDurationMs', 86_400_000);
  assertOptionalDate(params.now, 'now');
}

export interface ParsedLease extends LeaseTokenParts {
  readonly deliveryId: string;
}

/** Check a delivery id: the decimal id of a delivery row. */
export function assertDeliveryId(value: unknown, what = 'deliveryId'): asserts value is string {
  if (typeof value !== 'string' || !/^\d{1,19}$/.test(value))
    fail(`${what} must be a delivery id (a decimal string), got ${echo(value)}.`);
}

export function parseLease(lease: DeliveryLease): ParsedLease {
  if (typeof lease !== 'object' || lease === null) fail('A delivery lease must be { deliveryId, leaseToken }.');
  assertDeliveryId(lease.deliveryId);
  return { deliveryId: lease.deliveryId, ...parseLeaseToken(lease.leaseToken) };
}

export function parseLeases(leases: readonly DeliveryLease[]): ParsedLease[] {
  if (!Array.isArray(leases)) fail('Expected an array of delivery leases.');
  return leases.map(parseLease);
}

/** Check the failure text of reschedule/bury and return it as it can be recorded (see `recordableError`). */
export function validateError(error: unknown): string {
  if (typeof error !== 'string') fail('error must be a string (the failure message to record).');
  return recordableError(error);
}

export function validateRequeue(params: RequeueParams): void {
  if (typeof params !== 'object' || params === null) fail('requeue() takes { deliveryIds | handler | eventId | all }.');
  const { deliveryIds, handler, eventId, all } = params;
  if (deliveryIds === undefined && handler === undefined && eventId === undefined && all !== true) {
    fail('requeue() needs a selector: deliveryIds, handler, eventId, or all: true.');
  }
  if (deliveryIds !== undefined) {
    if (!Array.isArray(deliveryIds)) fail('deliveryIds must be an array.');
    deliveryIds.forEach((id, i) => assertDeliveryId(id, `deliveryIds[${i}]`));
  }
  if (handler !== undefined) assertName(handler, 'handler');
  if (eventId !== undefined) assertName(eventId, 'eventId');
  assertOptionalDate(params.now, 'now');
}

export function validateCancel(params: CancelParams): void {
  if (typeof params !== 'object' || params === null) fail('cancel() takes { eventId, handler? }.');
  assertName(params.eventId, 'eventId');
  if (params.handler !== undefined) assertName(params.handler, 'handler');
}

/** The longest reason a pause keeps. */
export const MAX_PAUSE_REASON = 1_000;

export function validatePauseHandler(params: PauseHandlerParams): void {
  if (typeof params !== 'object' || params === null) fail('pauseHandler() takes { handler, reason?, now? }.');
  assertName(params.handler, 'handler');
  if (params.reason !== undefined) {
    if (typeof params.reason !== 'string')
      fail(`reason must be a string, got ${echo(params.reason)}; nothing was paused.`);
    if (params.reason.length > MAX_PAUSE_REASON)
      fail(`reason must be at most ${MAX_PAUSE_REASON} characters, got ${params.reason.length}; nothing was paused.`);
    assertNoNul(params.reason, 'reason');
  }
  assertOptionalDate(params.now, 'now');
}

export function validateResumeHandler(params: ResumeHandlerParams): void {
  if (typeof params !== 'object' || params === null) fail('resumeHandler() takes { handler }.');
  assertName(params.handler, 'handler');
}

const STATUSES = new Set(['pending', 'processing', 'dead', 'completed']);

/** Normalised list parameters: the limit defaulted, the cursor checked. */
export function validateList(params: ListDeliveriesParams = {}): { limit: number; cursor: string | null } {
  if (params.status !== undefined && !STATUSES.has(params.status))
    fail(`status must be one of pending, processing, dead, completed; got ${echo(params.status)}.`);
  if (params.handler !== undefined) assertName(params.handler, 'handler');
  if (params.eventId !== undefined) assertName(params.eventId, 'eventId');
  if (params.key !== undefined) assertName(params.key, 'key');
  const limit = params.limit ?? 100;
  assertPositiveInteger(limit, 'limit', 1000);
  if (params.cursor !== undefined) assertDeliveryId(params.cursor, 'cursor');
  if (params.withPayload !== undefined && typeof params.withPayload !== 'boolean')
    fail(`withPayload must be a boolean, got ${echo(params.withPayload)}.`);
  return { limit, cursor: params.cursor ?? null };
}

export function validatePurge(params: PurgeParams): void {
  if (typeof params !== 'object' || params === null)
    fail('purgeExpired() takes { completedRetentionMs, deadRetentionMs }.');
  for (const name of ['completedRetentionMs', 'deadRetentionMs'] as const) {
    const value = params[name];
    if (!Number.isInteger(value) || value < 0)
      fail(`${name} must be a non-negative integer number of milliseconds, got ${echo(value)}.`);
  }
  assertOptionalDate(params.now, 'now');
}

/** Check subscriptions; returns each one's retry description as JSON text (or null). */
export function validateSubscriptions(
  subscriptions: readonly Subscription[],
  options?: SubscribeOptions,
): (string | null)[] {
  if (!Array.isArray(subscriptions)) fail('subscribe() takes an array of { eventType, handler, maxAttempts, retry? }.');
  if (
    options !== undefined &&
    (typeof options !== 'object' ||
      options === null ||
      options instanceof Date ||
      (options.seen !== undefined && typeof options.seen !== 'boolean'))
  ) {
    fail('subscribe() options must be { seen?: boolean, now?: Date } (now is a field of the options).');
  }
  assertOptionalDate(options?.now, 'now');
  const seen = new Set<string>();
  return subscriptions.map((subscription, index) => {
    const at = `subscriptions[${index}]`;
    if (typeof subscription !== 'object' || subscription === null) fail(`${at} must be an object.`);
    assertName(subscription.eventType, `${at}.eventType`);
    assertName(subscription.handler, `${at}.handler`);
    assertPositiveInteger(subscription.maxAttempts, `${at}.maxAttempts`, 1_000_000);
    const pair = JSON.stringify([subscription.eventType, subscription.handler]);
    if (seen.has(pair))
      fail(`${at} subscribes ${echo(subscription.handler)} to ${echo(subscription.eventType)} a second time.`);
    seen.add(pair);
    const { retry } = subscription;
    if (retry === undefined || retry === null) return null;
    if (typeof retry !== 'object' || Array.isArray(retry))
      fail(`${at}.retry must be an object describing the retry policy, or null.`);
    return payloadToJson(retry, `${at}.retry`);
  });
}

export function validateUnsubscribe(params: UnsubscribeParams): void {
  if (typeof params !== 'object' || params === null) fail('unsubscribe() takes { handler, eventType?, buryPending? }.');
  assertName(params.handler, 'handler');
  if (params.eventType !== undefined) assertName(params.eventType, 'eventType');
  if (params.buryPending !== undefined) {
    if (typeof params.buryPending !== 'string' || params.buryPending.trim() === '')
      fail("buryPending must be a non-empty reason (it becomes the dead letters' error).");
    assertNoNul(params.buryPending, 'buryPending');
  }
  assertOptionalDate(params.now, 'now');
}

/** Why unsubscribe() changed nothing, from what it found pending (undefined: it went ahead). */
export function unsubscribeRefusal(
  params: UnsubscribeParams,
  pending: number,
  inFlight: number,
): InvalidStateError | undefined {
  const what = `handler "${params.handler}"${params.eventType === undefined ? '' : ` of event type "${params.eventType}"`}`;
  if (inFlight > 0) {
    return new InvalidStateError(
      `Cannot unsubscribe ${what}: ${inFlight} of its deliveries are running. Stop its workers first; nothing was changed.`,
    );
  }
  if (pending > 0 && params.buryPending === undefined) {
    return new InvalidStateError(
      `Cannot unsubscribe ${what}: ${pending} of its deliveries are pending. Let a worker run them, or pass buryPending: "<reason>" (--bury-pending) to dead-letter them; nothing was changed.`,
    );
  }
  return undefined;
}

/** An event with no handler in this process and no subscription: it would be delivered to nobody. */
export function noHandlersError(event: PublishParams, index: number): InvalidInputError {
  return new InvalidInputError(
    `events[${index}]: event "${event.type}" has no handler here and no subscription in the database: nobody would get it. ` +
      'Start a worker that runs its handlers (or run relaybus setup --subscriptions); nothing was written, the transaction is usable.',
  );
}

/** Check reschedule()'s params; returns the error text as it can be recorded. */
export function validateReschedule(params: RescheduleParams): string {
  if (typeof params !== 'object' || params === null)
    fail('reschedule() params must be an object { availableAt, error, now? }.');
  assertDate(params.availableAt, 'availableAt');
  assertOptionalDate(params.now, 'now');
  return validateError(params.error);
}

/** Check bury()'s params; returns the error text as it can be recorded. */
export function validateBury(params: BuryParams): string {
  if (typeof params !== 'object' || params === null) fail('bury() params must be an object { error, now? }.');
  assertOptionalDate(params.now, 'now');
  return validateError(params.error);
}
