import { InvalidInputError } from '../core/errors.js';
import { parseLeaseToken, type LeaseTokenParts } from '../core/lease-token.js';
import type {
  ClaimParams, DeliveryLease, ExtendLeaseParams, ListDeliveriesParams, PublishParams, PurgeParams, RequeueParams,
} from './contract.js';

/**
 * Input checks shared by every store, so each throws the same typed error for the same bad input,
 * before anything is written.
 */

const MAX_NAME_LENGTH = 200;

function fail(message: string): never {
  throw new InvalidInputError(message);
}

export function assertName(value: unknown, what: string): asserts value is string {
  if (typeof value !== 'string' || value.length === 0 || value.length > MAX_NAME_LENGTH) {
    fail(`${what} must be a non-empty string of at most ${MAX_NAME_LENGTH} characters, got ${JSON.stringify(value)}.`);
  }
}

export function assertPositiveInteger(value: unknown, what: string, max = Number.MAX_SAFE_INTEGER): asserts value is number {
  if (!Number.isInteger(value) || (value as number) < 1 || (value as number) > max) {
    fail(`${what} must be an integer from 1 to ${max}, got ${JSON.stringify(value)}.`);
  }
}

export function assertDate(value: unknown, what: string): asserts value is Date {
  if (!(value instanceof Date) || Number.isNaN(value.getTime())) {
    fail(`${what} must be a valid Date, got ${String(value)}.`);
  }
}

function assertOptionalDate(value: unknown, what: string): void {
  if (value !== undefined) assertDate(value, what);
}

/** Serialise a payload, rejecting what JSON cannot represent faithfully (undefined, functions, bigint, cycles). */
export function payloadToJson(payload: unknown, what = 'payload'): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(payload, (_key, value: unknown) => {
      if (typeof value === 'bigint' || typeof value === 'function' || typeof value === 'symbol') {
        throw new TypeError(`a ${typeof value} is not JSON`);
      }
      if (typeof value === 'number' && !Number.isFinite(value)) throw new TypeError(`${value} is not JSON`);
      return value;
    });
  } catch (error) {
    throw new InvalidInputError(`The ${what} is not JSON-serialisable (${(error as Error).message}). Publish plain JSON values.`, { cause: error });
  }
  if (text === undefined) fail(`The ${what} is not JSON-serialisable (undefined). Publish plain JSON values.`);
  return text;
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
      if (ids.has(event.id)) fail(`${at}.id "${event.id}" appears twice in one publish call; publish each event once.`);
      ids.add(event.id);
    }
    assertName(event.type, `${at}.type`);
    if (event.key !== undefined && event.key !== null) assertName(event.key, `${at}.key`);
    const payloadJson = payloadToJson(event.payload, `${at}.payload`);
    if (event.headers !== undefined) {
      if (typeof event.headers !== 'object' || event.headers === null || Array.isArray(event.headers)) fail(`${at}.headers must be an object of strings.`);
      for (const [name, value] of Object.entries(event.headers)) {
        if (typeof value !== 'string') fail(`${at}.headers.${name} must be a string.`);
      }
    }
    if (!Array.isArray(event.handlers) || event.handlers.length === 0) fail(`${at}.handlers must list at least one handler.`);
    const names = new Set<string>();
    event.handlers.forEach((handler: PublishParams["handlers"][number], h: number) => {
      assertName(handler?.name, `${at}.handlers[${h}].name`);
      assertPositiveInteger(handler.maxAttempts, `${at}.handlers[${h}].maxAttempts`, 1_000_000);
      if (names.has(handler.name)) fail(`${at}.handlers lists "${handler.name}" twice.`);
      names.add(handler.name);
    });
    assertOptionalDate(event.availableAt, `${at}.availableAt`);
    return payloadJson;
  });
}

export function validateClaim(params: ClaimParams): void {
  assertName(params?.owner, 'owner');
  if (!Array.isArray(params.handlers) || params.handlers.length === 0) fail('claim() needs at least one handler name.');
  params.handlers.forEach((name, i) => assertName(name, `handlers[${i}]`));
  assertPositiveInteger(params.limit, 'limit', 10_000);
  assertPositiveInteger(params.leaseDurationMs, 'leaseDurationMs', 86_400_000);
  assertOptionalDate(params.now, 'now');
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
  if (typeof value !== 'string' || !/^\d{1,19}$/.test(value)) fail(`${what} must be a delivery id (a decimal string), got ${JSON.stringify(value)}.`);
}

export function parseLease(lease: DeliveryLease): ParsedLease {
  if (typeof lease !== 'object' || lease === null) fail('A delivery lease must be { deliveryId, lease }.');
  assertDeliveryId(lease.deliveryId);
  return { deliveryId: lease.deliveryId, ...parseLeaseToken(lease.lease) };
}

export function parseLeases(leases: readonly DeliveryLease[]): ParsedLease[] {
  if (!Array.isArray(leases)) fail('Expected an array of delivery leases.');
  return leases.map(parseLease);
}

export function validateError(error: unknown): void {
  if (typeof error !== 'string') fail('error must be a string (the failure message to record).');
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

const STATUSES = new Set(['pending', 'processing', 'dead', 'completed']);

/** Normalised list parameters: the limit defaulted, the cursor checked. */
export function validateList(params: ListDeliveriesParams = {}): { limit: number; cursor: string | null } {
  if (params.status !== undefined && !STATUSES.has(params.status)) fail(`status must be one of pending, processing, dead, completed; got ${JSON.stringify(params.status)}.`);
  if (params.handler !== undefined) assertName(params.handler, 'handler');
  if (params.eventId !== undefined) assertName(params.eventId, 'eventId');
  if (params.key !== undefined) assertName(params.key, 'key');
  const limit = params.limit ?? 100;
  assertPositiveInteger(limit, 'limit', 1000);
  if (params.cursor !== undefined) assertDeliveryId(params.cursor, 'cursor');
  return { limit, cursor: params.cursor ?? null };
}

export function validatePurge(params: PurgeParams): void {
  if (typeof params !== 'object' || params === null) fail('purgeExpired() takes { completedRetentionMs, deadRetentionMs }.');
  for (const name of ['completedRetentionMs', 'deadRetentionMs'] as const) {
    const value = params[name];
    if (!Number.isInteger(value) || value < 0) fail(`${name} must be a non-negative integer number of milliseconds, got ${JSON.stringify(value)}.`);
  }
  assertOptionalDate(params.now, 'now');
}
