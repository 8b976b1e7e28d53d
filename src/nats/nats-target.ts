import { headers as natsHeaders, type NatsConnection } from '@nats-io/transport-node';
import { jetstream, type JetStreamClient } from '@nats-io/jetstream';
import { InvalidOptionsError } from '../core/errors.js';
import { describeError, noopLogger, type Logger } from '../core/logger.js';
import { BrokerNotFoundError, BrokerRejectedError, MessageTooLargeError } from '../broker/broker-errors.js';
import { HEADERS, type OutboundMessage } from '../broker/broker-message.js';
import { checkPositiveIntegers } from '../broker/broker-options.js';
import { routeValue, type RelayTarget, type RouteValue } from '../broker/relay.js';
import { checkServers, connectNats, describeServers, jetStreamError, noStreamError } from './nats-connection.js';

/**
 * The JetStream side of the relay: `js.publish` with `Nats-Msg-Id` = event id, so that a re-send
 * within the stream's duplicate window is dropped by the server (the PubAck says `duplicate`), and
 * `send` resolves on the PubAck. The connection opens on the first send and reconnects by itself (logged to the
 * target's `logger`). A subject no stream captures fails with `BrokerNotFoundError` saying so, and is retried: the
 * inbox's `declare` creates the stream when it starts. A message over `max_payload`, a header NATS cannot carry or a
 * subject it refuses is a permanent failure: the delivery is dead at once.
 */

/** Where a relayed message goes: a subject a stream captures. */
export interface NatsRoute {
  readonly subject: RouteValue;
}

export interface NatsTargetOptions {
  /** `nats://host:4222`, or a list. */
  readonly servers: string | readonly string[];
  /** How long a publish waits for its PubAck. Default 10 s. */
  readonly timeoutMs?: number;
  readonly connectTimeoutMs?: number;
  /** The connection's name on the server. Default `relaybus relay`. */
  readonly connectionName?: string;
  /** Where the connection's losses and reconnects are logged (warn, info). Default silent. */
  readonly logger?: Logger;
}

/** The NATS header names of the relay (JetStream's own `Nats-Msg-Id` carries the id). */
export const NATS_HEADERS = Object.freeze({ msgId: 'Nats-Msg-Id' });

class NatsTarget implements RelayTarget<NatsRoute> {
  readonly name: string;
  readonly #options: NatsTargetOptions;
  readonly #servers: string[];
  readonly #logger: Logger;
  #link: Promise<{ nc: NatsConnection; js: JetStreamClient }> | undefined;

  constructor(options: NatsTargetOptions, servers: string[]) {
    this.#options = options;
    this.#servers = servers;
    this.name = describeServers(servers);
    this.#logger = options.logger ?? noopLogger;
  }

  async send(message: OutboundMessage, route: NatsRoute, signal: AbortSignal): Promise<void> {
    signal.throwIfAborted();
    const { nc, js } = await this.#connect();
    const subject = routeValue(route.subject, message);
    const h = natsHeaders();
    try {
      for (const [name, value] of Object.entries(message.headers)) h.set(name, value);
      h.set(HEADERS.type, message.type);
      h.set(HEADERS.createdAt, message.createdAt.toISOString());
      if (message.key !== null) h.set(HEADERS.key, message.key);
    } catch (error) {
      // A header name NATS refuses (a space, a colon) or a value with a line break: the event's own, every retry too.
      throw new BrokerRejectedError(
        `event ${message.id} (${message.type}) has a header NATS cannot carry (${describeError(error)}); it was not sent`,
        { cause: error, permanent: true },
      );
    }
    const limit = nc.info?.max_payload;
    if (limit !== undefined && message.body.length > limit) {
      throw new MessageTooLargeError(
        `event ${message.id} (${message.type}) is ${message.body.length} bytes, more than the ${limit} bytes NATS at ${this.name} accepts (max_payload); it was not sent`,
        message.body.length,
        limit,
      );
    }
    let ack: Awaited<ReturnType<typeof js.publish>>;
    try {
      ack = await js.publish(subject, message.body, {
        msgID: message.id,
        headers: h,
        timeout: this.#options.timeoutMs ?? 10_000,
      });
    } catch (error) {
      const what = `publish of event ${message.id} to "${subject}" on NATS at ${this.name}`;
      const typed = jetStreamError(error, what);
      if (typed instanceof MessageTooLargeError)
        throw new MessageTooLargeError(
          `${typed.message}: event ${message.id} (${message.type}), ${message.body.length} bytes and its headers, is over the ${limit ?? 'max_payload'} bytes NATS accepts (max_payload); it was not sent`,
          message.body.length,
          limit ?? 0,
        );
      // A subject a route function computed is this message's own; a fixed one is configuration (retried until fixed).
      if (error instanceof Error && error.name === 'InvalidSubjectError')
        throw new BrokerRejectedError(`${what}: NATS refuses the subject (${error.message}); it was not sent`, {
          cause: error,
          permanent: typeof route.subject !== 'string',
        });
      if (typed instanceof BrokerNotFoundError) throw await noStreamError(nc, subject, what, error);
      throw typed;
    }
    if (typeof ack?.seq !== 'number')
      throw new BrokerRejectedError(`NATS at ${this.name} returned no PubAck for event ${message.id}`, {
        retryable: true,
      });
  }

  async close(): Promise<void> {
    const pending = this.#link;
    this.#link = undefined;
    if (pending === undefined) return;
    try {
      await (await pending).nc.close();
    } catch {
      // never connected
    }
  }

  /** Log the connection's losses and reconnects (the client reconnects by itself; sends fail and retry meanwhile). */
  async #watch(nc: NatsConnection): Promise<void> {
    for await (const status of nc.status()) {
      if (status.type === 'disconnect')
        this.#logger.warn(`relay lost its connection to NATS at ${this.name}; the client reconnects`, {
          server: status.server,
        });
      else if (status.type === 'reconnect')
        this.#logger.info(`relay reconnected to NATS at ${this.name}`, { server: status.server });
      else if (status.type === 'error')
        this.#logger.warn(`NATS at ${this.name} reported an error to the relay`, {
          error: describeError(status.error),
        });
    }
  }

  #connect(): Promise<{ nc: NatsConnection; js: JetStreamClient }> {
    if (this.#link !== undefined) return this.#link;
    const opening = connectNats(
      this.#servers,
      this.#options.connectionName ?? 'relaybus relay',
      this.#options.connectTimeoutMs ?? 5_000,
    ).then((nc) => {
      void nc.closed().then(() => {
        if (this.#link === opening) this.#link = undefined;
      });
      void this.#watch(nc);
      this.#logger.debug(`relay connected to NATS at ${this.name}`);
      return { nc, js: jetstream(nc) };
    });
    this.#link = opening;
    opening.catch(() => {
      if (this.#link === opening) this.#link = undefined;
    });
    return opening;
  }
}

/**
 * A NATS JetStream target for `relayTo`.
 *
 * ```ts
 * const nats = natsTarget({ servers: 'nats://localhost:4222' });
 * bus.on(OrderPlaced, 'relay-to-nats', relayTo(nats, { subject: (m) => `orders.${m.type}` }));
 * ```
 */
export function natsTarget(options: NatsTargetOptions): RelayTarget<NatsRoute> {
  if (typeof options !== 'object' || options === null)
    throw new InvalidOptionsError('natsTarget: options are required: { servers }.');
  const servers = checkServers(options.servers, 'natsTarget');
  checkPositiveIntegers('natsTarget', options, ['timeoutMs', 'connectTimeoutMs']);
  return new NatsTarget(options, servers);
}
