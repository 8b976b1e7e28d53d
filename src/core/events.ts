import type { Static, TSchema } from '@sinclair/typebox';
import { TypeCompiler } from '@sinclair/typebox/compiler';
import { InvalidOptionsError, InvalidPayloadError } from './errors.js';
import { nameProblem } from './limits.js';

/**
 * Typed events. `defineEvent(type, schema)` pairs an event type name with a TypeBox schema; the
 * schema is compiled once, every payload is checked against it at publish (before anything is
 * written), and handlers receive the payload typed as `Static<typeof schema>`.
 *
 * Payloads are stored as JSON, so on top of the schema a payload must survive a JSON round trip
 * unchanged: no `undefined` in arrays, no `Date`, `Map`, class instances, bigints, functions or
 * non-finite numbers (a `Date` would reach the handler as a string).
 */

/** One rule a payload broke: a JSON pointer to the value (`/lines/0/qty`, `/` for the root) and the rule. */
export interface PayloadIssue {
  readonly path: string;
  readonly message: string;
}

const BRAND = Symbol.for('relaybus.event-definition');
const MAX_ISSUES = 20;
const ISSUES_IN_MESSAGE = 5;

/** An event type and its payload schema, made by `defineEvent`. */
export interface EventDefinition<TType extends string = string, TPayload extends TSchema = TSchema> {
  /** The event type name stored with every event (`order.placed`). */
  readonly type: TType;
  /** The TypeBox schema of the payload. */
  readonly schema: TPayload;
  /** Every rule `payload` breaks (schema and JSON round trip); empty when it is valid. */
  check(payload: unknown): readonly PayloadIssue[];
  /** The schema rules `payload` breaks (no JSON round-trip check: for payloads read back from the store). */
  checkSchema(payload: unknown): readonly PayloadIssue[];
  /** Return `payload` typed, or throw `InvalidPayloadError` naming each broken rule. */
  validate(payload: unknown): Static<TPayload>;
}

/** The payload type of an event definition. */
export type EventPayload<E> = E extends EventDefinition<string, infer S> ? Static<S> : never;

/**
 * Define an event: its type name and a TypeBox schema of its payload.
 *
 * ```ts
 * import { Type, defineEvent } from 'relaybus';
 *
 * export const OrderPlaced = defineEvent('order.placed', Type.Object({
 *   orderId: Type.String({ minLength: 1 }),
 *   totalCents: Type.Integer({ minimum: 0 }),
 * }));
 * // handlers of OrderPlaced receive { orderId: string; totalCents: number }
 * ```
 *
 * TypeBox has no built-in string formats: a schema using `format: 'uuid'` needs
 * `FormatRegistry.Set('uuid', ...)` from `@sinclair/typebox`, or every payload fails with
 * "Unknown format".
 */
export function defineEvent<const TType extends string, TPayload extends TSchema>(
  type: TType,
  schema: TPayload,
): EventDefinition<TType, TPayload> {
  const problem = nameProblem(type, 'defineEvent: the event type');
  if (problem !== undefined) throw new InvalidOptionsError(problem);
  if (typeof schema !== 'object' || schema === null) {
    throw new InvalidOptionsError(
      `defineEvent("${type}"): the second argument must be a TypeBox schema, e.g. Type.Object({ ... }).`,
    );
  }
  let compiled: ReturnType<typeof TypeCompiler.Compile<TPayload>>;
  try {
    compiled = TypeCompiler.Compile(schema);
  } catch (error) {
    throw new InvalidOptionsError(
      `defineEvent("${type}"): the schema could not be compiled (${(error as Error).message}). Build it with TypeBox's Type.* functions.`,
      { cause: error },
    );
  }

  const checkSchema = (payload: unknown): PayloadIssue[] => {
    const issues: PayloadIssue[] = [];
    if (compiled.Check(payload)) return issues;
    for (const error of compiled.Errors(payload)) {
      issues.push({ path: error.path === '' ? '/' : error.path, message: error.message });
      if (issues.length >= MAX_ISSUES) break;
    }
    return issues;
  };
  const check = (payload: unknown): readonly PayloadIssue[] => {
    const issues = checkSchema(payload);
    if (issues.length === 0) collectJsonIssues(payload, '', issues, new Set());
    return issues;
  };

  const definition: EventDefinition<TType, TPayload> = {
    type,
    schema,
    check,
    checkSchema,
    validate(payload: unknown): Static<TPayload> {
      const issues = check(payload);
      if (issues.length > 0) throw payloadError(type, issues);
      return payload as Static<TPayload>;
    },
  };
  Object.defineProperty(definition, BRAND, { value: true });
  return Object.freeze(definition);
}

/** True for a value made by `defineEvent` (of any copy of relaybus). */
export function isEventDefinition(value: unknown): value is EventDefinition {
  return typeof value === 'object' && value !== null && (value as Record<symbol, unknown>)[BRAND] === true;
}

function payloadError(type: string, issues: readonly PayloadIssue[]): InvalidPayloadError {
  const shown = issues
    .slice(0, ISSUES_IN_MESSAGE)
    .map((issue) => `${issue.path}: ${issue.message}`)
    .join('; ');
  const more = issues.length > ISSUES_IN_MESSAGE ? ` (and ${issues.length - ISSUES_IN_MESSAGE} more)` : '';
  const formatHint = issues.some((issue) => issue.message.startsWith('Unknown format'))
    ? ' Register the format with FormatRegistry.Set from @sinclair/typebox.'
    : '';
  return new InvalidPayloadError(
    `Invalid payload for event "${type}": ${shown}${more}. Nothing was written.${formatHint}`,
    issues,
  );
}

function escapePointer(segment: string): string {
  return segment.replace(/~/g, '~0').replace(/\//g, '~1');
}

/** Values that would not survive JSON.stringify + JSON.parse unchanged. */
function collectJsonIssues(value: unknown, path: string, issues: PayloadIssue[], ancestors: Set<object>): void {
  if (issues.length >= MAX_ISSUES) return;
  const at = path === '' ? '/' : path;
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return;
    case 'number':
      if (!Number.isFinite(value)) issues.push({ path: at, message: `${value} is not representable in JSON` });
      return;
    case 'undefined':
      issues.push({ path: at, message: 'undefined is not representable in JSON (omit the property instead)' });
      return;
    case 'bigint':
    case 'function':
    case 'symbol':
      issues.push({ path: at, message: `a ${typeof value} is not representable in JSON` });
      return;
    default:
      break;
  }
  if (value === null) return;
  const object = value as object;
  if (ancestors.has(object)) {
    issues.push({ path: at, message: 'circular reference' });
    return;
  }
  if (Array.isArray(object)) {
    ancestors.add(object);
    object.forEach((item: unknown, index) => collectJsonIssues(item, `${path}/${index}`, issues, ancestors));
    ancestors.delete(object);
    return;
  }
  const proto: unknown = Object.getPrototypeOf(object);
  if (proto !== Object.prototype && proto !== null) {
    const name = (object as { constructor?: { name?: string } }).constructor?.name ?? 'object';
    const hint = object instanceof Date ? ' (it would reach the handler as a string: publish an ISO string)' : '';
    issues.push({ path: at, message: `a ${name} is not a plain JSON value${hint}` });
    return;
  }
  ancestors.add(object);
  for (const [key, item] of Object.entries(object)) {
    if (item === undefined) continue; // JSON drops it, and so does an optional property
    collectJsonIssues(item, `${path}/${escapePointer(key)}`, issues, ancestors);
  }
  ancestors.delete(object);
}
