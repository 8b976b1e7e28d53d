import { InvalidInputError } from '../core/errors.js';
import { echo } from '../core/limits.js';
import type { ListReplaysParams, LiveWait, ReplayParams, ReplayState, ReplayStepParams } from './contract.js';
import { assertName, assertNoNul, assertOptionalDate } from './validate.js';

/** Input checks of the replay methods, shared by every store (see validate.ts): each throws before anything is written. */

export const MAX_REPLAY_REQUESTED_BY = 200;
export const MAX_REPLAY_REASON = 1_000;
export const MAX_REPLAY_HANDLERS = 100;
export const MAX_REPLAY_EVENT_TYPES = 1_000;
export const MAX_REPLAY_STEP = 10_000;
export const DEFAULT_REPLAY_STEP = 500;
export const MAX_REPLAY_LIST = 1_000;
export const DEFAULT_REPLAY_LIST = 100;

const MODES = new Set(['backfill', 'redrive']);
const STATES = new Set<ReplayState>(['running', 'finished', 'cancelled']);

function fail(message: string): never {
  throw new InvalidInputError(message);
}

function assertOptionalText(value: unknown, what: string, max: number): void {
  if (value === undefined) return;
  if (typeof value !== 'string') fail(`${what} must be a string, got ${echo(value)}; nothing was replayed.`);
  if (value.length > max) fail(`${what} must be at most ${max} characters, got ${value.length}; nothing was replayed.`);
  assertNoNul(value, what);
}

function assertNameList(value: unknown, what: string, max: number, required: boolean): void {
  if (value === undefined && !required) return;
  if (!Array.isArray(value) || (required && value.length === 0) || value.length > max)
    fail(`${what} must be ${required ? 'a non-empty' : 'an'} array of at most ${max} names, got ${echo(value)}.`);
  const seen = new Set<string>();
  value.forEach((name, index) => {
    assertName(name, `${what}[${index}]`);
    if (seen.has(name)) fail(`${what} names ${echo(name)} twice; nothing was replayed.`);
    seen.add(name);
  });
}

/** The checks of `planReplay` and `startReplay`. */
export function validateReplay(params: ReplayParams): void {
  if (typeof params !== 'object' || params === null)
    fail('A replay takes { mode, handlers, eventTypes?, since?, until?, fromEventId?, toEventId?, key?, ... }.');
  if (!MODES.has(params.mode)) fail(`mode must be 'backfill' or 'redrive', got ${echo(params.mode)}.`);
  assertNameList(params.handlers, 'handlers', MAX_REPLAY_HANDLERS, true);
  assertNameList(params.eventTypes, 'eventTypes', MAX_REPLAY_EVENT_TYPES, false);
  assertOptionalDate(params.since, 'since');
  assertOptionalDate(params.until, 'until');
  if (params.since !== undefined && params.until !== undefined && params.since.getTime() >= params.until.getTime())
    fail(`since (${params.since.toISOString()}) must be before until (${params.until.toISOString()}).`);
  if (params.fromEventId !== undefined) assertName(params.fromEventId, 'fromEventId');
  if (params.toEventId !== undefined) assertName(params.toEventId, 'toEventId');
  if (params.fromEventId !== undefined && params.toEventId !== undefined && params.fromEventId > params.toEventId)
    fail(`fromEventId ${echo(params.fromEventId)} comes after toEventId ${echo(params.toEventId)} in the ids' order.`);
  if (params.key !== undefined) assertName(params.key, 'key');
  assertOptionalText(params.requestedBy, 'requestedBy', MAX_REPLAY_REQUESTED_BY);
  assertOptionalText(params.reason, 'reason', MAX_REPLAY_REASON);
  assertOptionalDate(params.now, 'now');
}

/** A replay id: the decimal text the store gave. */
export function assertReplayId(value: unknown): asserts value is string {
  if (typeof value !== 'string' || !/^[1-9]\d{0,18}$/.test(value))
    fail(`replayId must be a replay id (a positive decimal string), got ${echo(value)}.`);
}

/** The checks of `replayStep`; returns the step's limit, defaulted. */
export function validateReplayStep(params: ReplayStepParams): number {
  if (typeof params !== 'object' || params === null) fail('replayStep() takes { replayId, limit?, now? }.');
  assertReplayId(params.replayId);
  const limit = params.limit ?? DEFAULT_REPLAY_STEP;
  if (!Number.isInteger(limit) || limit < 0 || limit > MAX_REPLAY_STEP)
    fail(`limit must be an integer from 0 to ${MAX_REPLAY_STEP}, got ${echo(params.limit)}.`);
  assertOptionalDate(params.now, 'now');
  return limit;
}

/** The checks of `listReplays`; returns the limit, defaulted. */
export function validateListReplays(params: ListReplaysParams = {}): number {
  if (typeof params !== 'object' || params === null) fail('listReplays() takes { state?, limit? }.');
  if (params.state !== undefined && !STATES.has(params.state))
    fail(`state must be 'running', 'finished' or 'cancelled', got ${echo(params.state)}.`);
  const limit = params.limit ?? DEFAULT_REPLAY_LIST;
  if (!Number.isInteger(limit) || limit < 1 || limit > MAX_REPLAY_LIST)
    fail(`limit must be an integer from 1 to ${MAX_REPLAY_LIST}, got ${echo(params.limit)}.`);
  return limit;
}

/** Handlers a live lag report names at most (`Store.reportLiveLag`). */
export const MAX_LIVE_LAG_REPORTED = 16;

/** `Store.reportLiveLag`'s waits: at most 16, each a handler name and a finite, non-negative ms. */
export function validateLiveWaits(waits: readonly LiveWait[]): void {
  if (!Array.isArray(waits) || waits.length > MAX_LIVE_LAG_REPORTED)
    fail(
      `reportLiveLag() takes an array of at most ${MAX_LIVE_LAG_REPORTED} waits, got ${echo(waits)}; nothing was sent.`,
    );
  waits.forEach((wait: unknown, index) => {
    if (typeof wait !== 'object' || wait === null) fail(`waits[${index}] must be { handler, ms }, got ${echo(wait)}.`);
    const { handler, ms } = wait as Partial<LiveWait>;
    assertName(handler, `waits[${index}].handler`);
    if (typeof ms !== 'number' || !Number.isFinite(ms) || ms < 0)
      fail(`waits[${index}].ms must be a finite number of ms, 0 or more, got ${echo(ms)}; nothing was sent.`);
  });
}
