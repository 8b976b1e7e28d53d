/**
 * Every error relaybus throws on purpose is a `RelayBusError` with a stable `code`, so callers can
 * branch on `error.code` instead of parsing messages. Messages say what to do about the problem.
 */
/** Every code a `RelayBusError` can carry (the reference's consistency test reads it: test/docs/reference.test.ts). */
export const RELAYBUS_ERROR_CODES = [
  'RELAYBUS_INVALID_OPTIONS',
  'RELAYBUS_INVALID_INPUT',
  'RELAYBUS_INVALID_LEASE',
  'RELAYBUS_INVALID_PAYLOAD',
  'RELAYBUS_UNKNOWN_EVENT',
  'RELAYBUS_UNKNOWN_HANDLER',
  'RELAYBUS_STORE_UNAVAILABLE',
  'RELAYBUS_SCHEMA_MISMATCH',
  'RELAYBUS_INVALID_STATE',
  'RELAYBUS_CONFLICT',
  'RELAYBUS_BROKER_UNAVAILABLE',
  'RELAYBUS_BROKER_NOT_FOUND',
  'RELAYBUS_MESSAGE_TOO_LARGE',
  'RELAYBUS_BROKER_REJECTED',
] as const;

export type RelayBusErrorCode = (typeof RELAYBUS_ERROR_CODES)[number];

/** Options every relaybus error takes: the underlying error, and whether the same call may succeed later. */
export interface RelayBusErrorOptions {
  readonly cause?: unknown;
  /** Default false: only a store failure that a retry can fix (connection lost, restart, deadlock) says true. */
  readonly retryable?: boolean;
}

/** Base class of every error relaybus throws deliberately. */
export class RelayBusError extends Error {
  readonly code: RelayBusErrorCode;
  /**
   * True when the same call may succeed if made again later, unchanged: the connection was lost, the
   * database is restarting or shutting down, a serialization failure or deadlock. False for bad input,
   * data Postgres rejects, constraints, privileges and schema problems: retrying those repeats the failure.
   */
  readonly retryable: boolean;
  constructor(code: RelayBusErrorCode, message: string, options?: RelayBusErrorOptions) {
    super(message, options?.cause === undefined ? undefined : { cause: options.cause });
    this.name = new.target.name;
    this.code = code;
    this.retryable = options?.retryable ?? false;
  }
}

/** True when `error` is one a retry of the same call can fix (see `RelayBusError.retryable`). */
export function isRetryableError(error: unknown): boolean {
  return error instanceof RelayBusError && error.retryable;
}

/** Options passed to a factory (store, bus, dispatcher) are missing, of the wrong type or out of range. */
export class InvalidOptionsError extends RelayBusError {
  constructor(message: string, options?: RelayBusErrorOptions) {
    super('RELAYBUS_INVALID_OPTIONS', message, options);
  }
}

/** Arguments of a store or bus operation are invalid; nothing was written. */
export class InvalidInputError extends RelayBusError {
  constructor(message: string, options?: RelayBusErrorOptions) {
    super('RELAYBUS_INVALID_INPUT', message, options);
  }
}

/** A lease token is malformed (not `lane:epoch:claims`, or a lane outside 0..255). A stale token is not an error: fenced writes return false. */
export class InvalidLeaseError extends RelayBusError {
  constructor(message: string) {
    super('RELAYBUS_INVALID_LEASE', message);
  }
}

/** A payload does not match its event schema, or is not JSON-serialisable; nothing was written. */
export class InvalidPayloadError extends RelayBusError {
  /** One entry per rule the payload broke: JSON pointer path and message. */
  readonly issues: readonly { readonly path: string; readonly message: string }[];
  constructor(message: string, issues: readonly { path: string; message: string }[] = []) {
    super('RELAYBUS_INVALID_PAYLOAD', message);
    this.issues = issues;
  }
}

/** An event type was published or subscribed that the bus was not configured with. */
export class UnknownEventError extends RelayBusError {
  constructor(message: string) {
    super('RELAYBUS_UNKNOWN_EVENT', message);
  }
}

/** A handler name was used that is not registered (or is registered twice). */
export class UnknownHandlerError extends RelayBusError {
  constructor(message: string) {
    super('RELAYBUS_UNKNOWN_HANDLER', message);
  }
}

/**
 * The database could not be reached or failed underneath; `cause` holds the driver's error and
 * `retryable` says whether the same call may succeed later (connection lost, restart, deadlock) or
 * not (data Postgres rejects, a constraint, missing privileges).
 */
export class StoreUnavailableError extends RelayBusError {
  constructor(message: string, options?: RelayBusErrorOptions) {
    super('RELAYBUS_STORE_UNAVAILABLE', message, options);
  }
}

/**
 * An event id was published again with a different type, key or payload: a second, different
 * event under an id that is taken. Nothing was written. `eventId` and `differences` say what.
 */
export class EventConflictError extends RelayBusError {
  readonly eventId: string;
  /** The fields that differ from the stored event: 'type', 'key', 'payload'. */
  readonly differences: readonly string[];
  constructor(message: string, eventId: string, differences: readonly string[]) {
    super('RELAYBUS_CONFLICT', message);
    this.eventId = eventId;
    this.differences = differences;
  }
}

/** The relaybus tables are missing or were created by an incompatible version. */
export class SchemaMismatchError extends RelayBusError {
  constructor(message: string, options?: RelayBusErrorOptions) {
    super('RELAYBUS_SCHEMA_MISMATCH', message, options);
  }
}

/** An operation was called in a state that does not allow it (a closed store, a started bus). */
export class InvalidStateError extends RelayBusError {
  constructor(message: string) {
    super('RELAYBUS_INVALID_STATE', message);
  }
}

/** A handler name was registered twice (handler names are unique per bus: deliveries name their handler). */
export class DuplicateHandlerError extends UnknownHandlerError {}
