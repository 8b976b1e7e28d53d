/**
 * Which database failures a retry can fix. Classified once, here, at the store boundary: the store
 * turns every driver error into a `RelayBusError` whose `retryable` comes from this function, and
 * the dispatcher, the CLI worker and callers read that property instead of parsing messages.
 *
 * Retryable means "the same call, unchanged, may succeed later": the connection was lost, the
 * server is restarting or out of resources, a serialization failure or deadlock. Data Postgres
 * rejects, constraints, privileges, a missing table or a bug in a statement fail the same way
 * every time, so they are not.
 */
import { RelayBusError } from '../core/errors.js';

/** SQLSTATE classes (first two characters) that a later retry can get past. */
const RETRYABLE_CLASSES = new Set([
  '08', // connection exception: the connection failed or was lost
  '53', // insufficient resources: too many connections, out of memory or disk (an operator fixes it; the worker waits)
  '57', // operator intervention: admin shutdown, crash shutdown, cannot connect now
]);

/** Single SQLSTATEs a retry can get past. */
const RETRYABLE_STATES = new Set([
  '40001', // serialization_failure
  '40P01', // deadlock_detected
  '55P03', // lock_not_available
  '58000', // system_error
  '58030', // io_error
  'XX000', // internal_error: seen while a server restarts; a retry either succeeds or fails the same way
]);

/** SQLSTATEs in a retryable class that retrying will not fix. */
const PERMANENT_STATES = new Set([
  '57014', // query_canceled by statement_timeout: the same statement takes as long again
  '08P01', // protocol_violation: also a statement sent with the wrong number of parameters (a bug)
  '57P04', // database_dropped
]);

/** Node socket errors (and driver codes) of a connection that dropped or never opened. */
const RETRYABLE_SOCKET_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT', // postgres.js
]);

const RETRYABLE_MESSAGES = [
  /connection terminated/i, // pg: "Connection terminated unexpectedly", "Connection terminated due to connection timeout"
  /terminating connection/i,
  /the database system is (starting up|shutting down|in recovery mode)/i,
  /client has encountered a connection error/i, // pg: a client used after its connection failed
  /timeout exceeded when trying to connect/i, // pg-pool
  /connection (is )?closed/i,
];

/** How deep a chain of `cause`s is followed to find the driver's error under a wrapper. */
const MAX_CAUSE_DEPTH = 4;

/** The SQLSTATE of a driver error, if it has one. */
export function sqlStateOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  // Postgres's classes are two digits or F0, HV, P0, XX: never a Node errno like EPIPE.
  return typeof code === 'string' && /^(?:[0-9][0-9A-Z]|F0|HV|P0|XX)[0-9A-Z]{3}$/.test(code) ? code : undefined;
}

function classify(error: unknown, depth: number): boolean | undefined {
  if (error instanceof RelayBusError) return error.retryable;
  const sqlState = sqlStateOf(error);
  if (sqlState !== undefined) {
    if (PERMANENT_STATES.has(sqlState)) return false;
    return RETRYABLE_STATES.has(sqlState) || RETRYABLE_CLASSES.has(sqlState.slice(0, 2));
  }
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && RETRYABLE_SOCKET_CODES.has(code)) return true;
  const errors = (error as { errors?: unknown } | null)?.errors; // AggregateError of a multi-address connect
  if (Array.isArray(errors) && errors.some((inner) => classify(inner, depth + 1) === true)) return true;
  const message = error instanceof Error ? error.message : typeof error === 'string' ? error : '';
  if (RETRYABLE_MESSAGES.some((pattern) => pattern.test(message))) return true;
  // A wrapper (an ORM's query error) carries the driver's error as its cause.
  const cause = error instanceof Error ? error.cause : undefined;
  if (cause !== undefined && depth < MAX_CAUSE_DEPTH) return classify(cause, depth + 1);
  return undefined;
}

/**
 * True when the same statement may succeed if run again later. A `RelayBusError` answers with its
 * own `retryable`; a wrapper without a SQLSTATE is classified by its `cause`. Anything not known
 * to be transient is not retryable.
 */
export function isRetryableDatabaseError(error: unknown): boolean {
  return classify(error, 0) === true;
}
