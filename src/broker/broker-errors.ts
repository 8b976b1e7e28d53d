import { RelayBusError, type RelayBusErrorCode, type RelayBusErrorOptions } from '../core/errors.js';
import { isPermanentFailure, markPermanent } from '../core/permanent-failure.js';

/**
 * Typed errors of the broker bridge (`relaybus/amqp`, `relaybus/nats`): a broker that cannot be
 * reached, a queue/stream/consumer that does not exist, a message over the broker's size limit, a
 * publish the broker refused. Each is a `RelayBusError` with a stable `code` and `retryable`.
 *
 * The relay retries every one of them except those about the message itself, which a retry repeats exactly: a
 * `MessageTooLargeError`, and a `BrokerRejectedError` made with `permanent: true` (a message the client cannot
 * encode, a route the broker cannot take). Those are permanent failures (`isPermanentFailure`): their delivery is
 * dead at once. A broker that is down, a refused login, a missing exchange or stream stay retried: they are fixed
 * on the broker's side, and burying would send every delivery of the backlog to the dead letters, out of key order.
 */

/** The codes of the broker errors (part of `RelayBusErrorCode`). */
export type BrokerErrorCode = Extract<
  RelayBusErrorCode,
  | 'RELAYBUS_BROKER_UNAVAILABLE'
  | 'RELAYBUS_BROKER_NOT_FOUND'
  | 'RELAYBUS_MESSAGE_TOO_LARGE'
  | 'RELAYBUS_BROKER_REJECTED'
>;

/**
 * The broker could not be reached or dropped the connection (`retryable: true`), or refused it for
 * good: bad credentials, an unknown virtual host (`retryable: false`). The message names the broker
 * (its URL without the password).
 */
export class BrokerUnavailableError extends RelayBusError {
  constructor(message: string, options?: RelayBusErrorOptions) {
    super('RELAYBUS_BROKER_UNAVAILABLE', message, { retryable: true, ...options });
  }
}

/** A queue, exchange, stream or consumer the caller named does not exist. Nothing was consumed or published. */
export class BrokerNotFoundError extends RelayBusError {
  constructor(message: string, options?: RelayBusErrorOptions) {
    super('RELAYBUS_BROKER_NOT_FOUND', message, options);
  }
}

/**
 * A message is larger than the broker accepts; it was not sent. A permanent failure: a retry repeats it, so the relay's
 * delivery is dead at once.
 */
export class MessageTooLargeError extends RelayBusError {
  readonly size: number;
  readonly limit: number;
  constructor(message: string, size: number, limit: number) {
    super('RELAYBUS_MESSAGE_TOO_LARGE', message);
    this.size = size;
    this.limit = limit;
    markPermanent(this);
  }

  /** Always true: see `isPermanentFailure`. */
  get permanent(): boolean {
    return true;
  }
}

/** Options of a `BrokerRejectedError`. */
export interface BrokerRejectedErrorOptions extends RelayBusErrorOptions {
  /** The message itself is the cause (it cannot be encoded, its route is invalid): a retry repeats it. Default false. */
  readonly permanent?: boolean;
}

/**
 * The broker refused a publish: negatively confirmed, unroutable (no queue bound), or a precondition failed; or the
 * client could not encode the message (`permanent`: the relay's delivery is dead at once).
 */
export class BrokerRejectedError extends RelayBusError {
  constructor(message: string, options?: BrokerRejectedErrorOptions) {
    super('RELAYBUS_BROKER_REJECTED', message, options);
    if (options?.permanent === true) markPermanent(this);
  }

  /** True when a retry repeats it: see `isPermanentFailure`. */
  get permanent(): boolean {
    return isPermanentFailure(this);
  }
}

/** `url` with its password replaced by `***`, for messages and logs. */
export function redactUrl(url: string): string {
  try {
    const parsed = new URL(url);
    if (parsed.password !== '') parsed.password = '***';
    return parsed.toString().replace(/%2A%2A%2A/g, '***');
  } catch {
    return '(unparseable URL)';
  }
}
