import { EventConflictError, InvalidInputError, InvalidPayloadError, UnknownEventError } from '../core/errors.js';

/**
 * Why the inbox sends a message to the dead-letter route instead of acknowledging it. Only the
 * message itself can be the reason: a store that fails is retried, never a cause to dead-letter.
 */
export type DeadLetterReason =
  /** The message has no id, so a redelivery could not be told from a new message. */
  | 'missing-id'
  /** The payload breaks its event schema (`InvalidPayloadError`). */
  | 'invalid-payload'
  /** The id was taken by a different event: other type, key or payload (`EventConflictError`). */
  | 'conflict'
  /** No event of the inbox has the message's type. */
  | 'unknown-type'
  /** The body could not be read (not JSON). */
  | 'malformed'
  /** The store refused the event's fields: an id or key too long, a NUL character, no handler for its type. */
  | 'invalid-input';

/** Every reason, for validation and docs. */
export const DEAD_LETTER_REASONS: readonly DeadLetterReason[] = [
  'missing-id',
  'invalid-payload',
  'conflict',
  'unknown-type',
  'malformed',
  'invalid-input',
];

/** The dead-letter reason of an error of `bus.publish`, or undefined when it is not the message's fault (retry). */
export function deadLetterReasonOf(error: unknown): DeadLetterReason | undefined {
  if (error instanceof EventConflictError) return 'conflict';
  if (error instanceof InvalidPayloadError) return 'invalid-payload';
  if (error instanceof UnknownEventError) return 'unknown-type';
  if (error instanceof InvalidInputError) return 'invalid-input';
  return undefined;
}

/** At most `max` characters of `text`, for a header. */
export function truncate(text: string, max = 1_000): string {
  return text.length <= max ? text : `${text.slice(0, max - 1)}…`;
}
