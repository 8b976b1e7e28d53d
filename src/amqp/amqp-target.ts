import type amqp from 'amqplib';
import { InvalidOptionsError } from '../core/errors.js';
import { describeError, noopLogger, type Logger } from '../core/logger.js';
import {
  BrokerNotFoundError,
  BrokerRejectedError,
  BrokerUnavailableError,
  MessageTooLargeError,
  redactUrl,
} from '../broker/broker-errors.js';
import { HEADERS, type OutboundMessage } from '../broker/broker-message.js';
import { checkPositiveIntegers } from '../broker/broker-options.js';
import { routeValue, type RelayTarget, type RouteValue } from '../broker/relay.js';
import { channelError, checkAmqpUrl, closeQuietly, connectAmqp } from './amqp-connection.js';

/**
 * The RabbitMQ side of the relay: one connection and one confirm channel, opened on the first send
 * and again after a loss. Each message is published persistent and mandatory, with message id = event
 * id, `type` = event type, the key in the `relaybus-key` header; `send` resolves on the publisher
 * confirm. A negative confirm, an unroutable message (no queue bound: returned), a closed channel or
 * a timeout rejects, so the relay handler fails and is retried; nothing is lost. A message too large for the broker,
 * or one amqplib cannot encode (a routing key over 255 bytes), is a permanent failure: its delivery is dead at once.
 */

/** Where a relayed message goes. */
export interface AmqpRoute {
  readonly exchange: RouteValue;
  readonly routingKey: RouteValue;
}

export interface AmqpTargetOptions {
  /** `amqp://user:password@host:5672/vhost`. */
  readonly url: string;
  /** How long a publish waits for its confirm. Default 30 s. */
  readonly confirmTimeoutMs?: number;
  /** Larger messages are refused before sending (RabbitMQ's `max_message_size`, default 128 MiB). */
  readonly maxMessageBytes?: number;
  /** Connection timeout. Default 5 s. */
  readonly connectTimeoutMs?: number;
  /** Shown in RabbitMQ's connection list. Default `relaybus relay`. */
  readonly connectionName?: string;
  readonly logger?: Logger;
}

/** RabbitMQ's default `max_message_size`. */
export const AMQP_DEFAULT_MAX_MESSAGE_BYTES = 134_217_728;

interface Link {
  readonly model: amqp.ChannelModel;
  readonly channel: amqp.ConfirmChannel;
  /** `exchange\0routingKey\0messageId` of messages RabbitMQ returned as unroutable, until their confirm. */
  readonly returned: Map<string, number>;
  /** The error that closed the channel, to explain the failed confirms. */
  lastError: unknown;
  /** Exchanges checked to exist on this connection: a publish to a missing one would close the shared channel. */
  readonly exchanges: Map<string, Promise<void>>;
  closed: boolean;
}

const returnKey = (exchange: string, routingKey: string, id: string) => `${exchange}\0${routingKey}\0${id}`;

class AmqpTarget implements RelayTarget<AmqpRoute> {
  readonly name: string;
  readonly #options: AmqpTargetOptions;
  readonly #logger: Logger;
  #link: Promise<Link> | undefined;

  constructor(options: AmqpTargetOptions) {
    this.#options = options;
    this.name = redactUrl(options.url);
    this.#logger = options.logger ?? noopLogger;
  }

  async send(message: OutboundMessage, route: AmqpRoute, signal: AbortSignal): Promise<void> {
    const limit = this.#options.maxMessageBytes ?? AMQP_DEFAULT_MAX_MESSAGE_BYTES;
    if (message.body.length > limit) {
      throw new MessageTooLargeError(
        `event ${message.id} (${message.type}) is ${message.body.length} bytes, more than the ${limit} bytes RabbitMQ at ${this.name} accepts; it was not sent`,
        message.body.length,
        limit,
      );
    }
    signal.throwIfAborted();
    const link = await this.#connect();
    const exchange = routeName(route.exchange, message, 'exchange', this.name);
    const routingKey = routeName(route.routingKey, message, 'routingKey', this.name);
    await this.#checkExchange(link, exchange);
    const key = returnKey(exchange, routingKey, message.id);
    const headers: Record<string, string> = {
      ...message.headers,
      [HEADERS.type]: message.type,
      [HEADERS.createdAt]: message.createdAt.toISOString(),
    };
    if (message.key !== null) headers[HEADERS.key] = message.key;
    const timeoutMs = this.#options.confirmTimeoutMs ?? 30_000;
    let timer: NodeJS.Timeout | undefined;
    let onAbort: (() => void) | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        timer = setTimeout(
          () =>
            reject(
              new BrokerUnavailableError(
                `RabbitMQ at ${this.name} did not confirm event ${message.id} within ${timeoutMs} ms`,
              ),
            ),
          timeoutMs,
        );
        onAbort = () => reject(signal.reason instanceof Error ? signal.reason : new Error('aborted'));
        signal.addEventListener('abort', onAbort, { once: true });
        try {
          link.channel.publish(
            exchange,
            routingKey,
            message.body,
            {
              messageId: message.id,
              type: message.type,
              contentType: 'application/json',
              persistent: true,
              mandatory: true,
              timestamp: Math.floor(message.createdAt.getTime() / 1000),
              headers,
            },
            (error: unknown) => {
              if (error) {
                reject(
                  link.lastError !== undefined
                    ? this.#closedBy(link.lastError, exchange, message.body.length)
                    : new BrokerRejectedError(
                        `RabbitMQ at ${this.name} refused event ${message.id} (negative confirm or closed channel): ${describeError(error)}`,
                        { retryable: true },
                      ),
                );
                return;
              }
              const returned = link.returned.get(key) ?? 0;
              if (returned > 0) {
                if (returned === 1) link.returned.delete(key);
                else link.returned.set(key, returned - 1);
                reject(
                  new BrokerRejectedError(
                    `event ${message.id}: no queue is bound to exchange "${exchange}" with routing key "${routingKey}" on ${this.name}; RabbitMQ returned it unroutable (start the inbox, whose \`declare\` binds its queue; the relay retries)`,
                  ),
                );
                return;
              }
              resolve();
            },
          );
        } catch (error) {
          // amqplib throws synchronously on a closed channel (retried), on headers over its encoding buffer
          // (RangeError) and on a field it cannot encode, such as a routing key over 255 bytes (TypeError): those two
          // are the message's own, a retry repeats them.
          reject(
            error instanceof RangeError
              ? new MessageTooLargeError(
                  `event ${message.id} (${message.type}): RabbitMQ at ${this.name} cannot take its headers (${error.message}); it was not sent`,
                  message.body.length,
                  limit,
                )
              : error instanceof TypeError
                ? new BrokerRejectedError(
                    `event ${message.id} (${message.type}) cannot be encoded for RabbitMQ at ${this.name} (${error.message}); it was not sent`,
                    { cause: error, permanent: true },
                  )
                : new BrokerUnavailableError(`RabbitMQ at ${this.name}: ${describeError(error)}`, { cause: error }),
          );
        }
      });
    } finally {
      clearTimeout(timer);
      if (onAbort !== undefined) signal.removeEventListener('abort', onAbort);
    }
  }

  /** Check once per connection that `exchange` exists, on a channel of its own (a 404 closes the channel it runs on). */
  #checkExchange(link: Link, exchange: string): Promise<void> {
    if (exchange === '' || exchange.startsWith('amq.')) return Promise.resolve();
    let checked = link.exchanges.get(exchange);
    if (checked === undefined) {
      checked = (async () => {
        const channel = await link.model.createChannel();
        channel.on('error', () => {});
        try {
          await channel.checkExchange(exchange);
        } catch (error) {
          const typed = channelError(error, `exchange "${exchange}" on ${this.name}`);
          // Usually the inbox that declares it has not started yet: say so (the relay retries meanwhile).
          if (typed instanceof BrokerNotFoundError)
            throw new BrokerNotFoundError(
              `${typed.message}. Start the inbox first: amqpInbox({ declare: { bindings } }) declares the exchange when \`relaybus inbox\` starts (or declare it yourself); the relay retries until it exists`,
              { cause: error },
            );
          throw typed;
        } finally {
          await closeQuietly(channel);
        }
      })();
      link.exchanges.set(exchange, checked);
      checked.catch(() => link.exchanges.delete(exchange)); // checked again next time: it may have been declared since
    }
    return checked;
  }

  /**
   * The error of a confirm that failed because the channel closed: this publish's fault, or another's (then retried).
   * A message over the server's `max_message_size` is this one's when the size RabbitMQ names is its size.
   */
  #closedBy(error: unknown, exchange: string, size: number): Error {
    const typed = channelError(error, `exchange "${exchange}" on ${this.name}`);
    const text = error instanceof Error ? error.message : String(error);
    if (typed instanceof MessageTooLargeError && typed.size !== size)
      return new BrokerUnavailableError(
        `RabbitMQ at ${this.name} closed the channel because of another, larger publish (${text}); retried`,
        { cause: error },
      );
    if (typed instanceof BrokerUnavailableError || typed instanceof MessageTooLargeError) return typed;
    if (text.includes(`'${exchange}'`)) return typed;
    return new BrokerUnavailableError(
      `RabbitMQ at ${this.name} closed the channel because of another publish (${text}); retried`,
      { cause: error },
    );
  }

  async close(): Promise<void> {
    const pending = this.#link;
    this.#link = undefined;
    if (pending === undefined) return;
    try {
      const link = await pending;
      link.closed = true;
      await closeQuietly(link.channel);
      await closeQuietly(link.model);
    } catch {
      // never connected
    }
  }

  #connect(): Promise<Link> {
    const current = this.#link;
    if (current !== undefined) return current;
    const opening = (async (): Promise<Link> => {
      const model = await connectAmqp(
        this.#options.url,
        this.#options.connectionName ?? 'relaybus relay',
        this.#options.connectTimeoutMs ?? 5_000,
      );
      model.on('error', (error: Error) =>
        this.#logger.debug('RabbitMQ relay connection error', { error: describeError(error) }),
      );
      let channel: amqp.ConfirmChannel;
      try {
        channel = await model.createConfirmChannel();
      } catch (error) {
        await closeQuietly(model);
        throw new BrokerUnavailableError(
          `RabbitMQ at ${this.name}: could not open a channel: ${describeError(error)}`,
          { cause: error },
        );
      }
      const link: Link = {
        model,
        channel,
        returned: new Map(),
        lastError: undefined,
        closed: false,
        exchanges: new Map(),
      };
      channel.on('error', (error: Error) => {
        link.lastError = error;
      });
      channel.on('return', (returned: amqp.Message) => {
        const fields = returned.fields as { exchange: string; routingKey: string };
        const key = returnKey(fields.exchange, fields.routingKey, String(returned.properties.messageId));
        link.returned.set(key, (link.returned.get(key) ?? 0) + 1);
      });
      const lost = () => {
        if (link.closed) return;
        link.closed = true;
        if (this.#link === opening) this.#link = undefined; // the next send reconnects
        void closeQuietly(model);
      };
      model.on('close', lost);
      channel.on('close', lost);
      return link;
    })();
    this.#link = opening;
    opening.catch(() => {
      if (this.#link === opening) this.#link = undefined;
    });
    return opening;
  }
}

/**
 * A route field's value for `message`, at most 255 bytes (AMQP's short string). Over it, a fixed name is a
 * configuration error (retried: every event waits until it is fixed); one a route function computed for this message
 * is the message's own (permanent: its delivery is dead at once).
 */
function routeName(value: RouteValue, message: OutboundMessage, field: string, broker: string): string {
  const name = routeValue(value, message);
  const bytes = Buffer.byteLength(name);
  if (bytes <= 255) return name;
  const fixed = typeof value === 'string';
  throw new BrokerRejectedError(
    `event ${message.id} (${message.type}): the ${fixed ? 'route' : 'route function'} gave ${field} "${name.slice(0, 40)}…" of ${bytes} bytes; RabbitMQ at ${broker} takes at most 255; it was not sent`,
    { permanent: !fixed },
  );
}

/**
 * A RabbitMQ target for `relayTo`.
 *
 * ```ts
 * const rabbit = amqpTarget({ url: process.env.AMQP_URL! });
 * bus.on(OrderPlaced, 'relay-to-rabbit', relayTo(rabbit, { exchange: 'orders', routingKey: (m) => m.type }));
 * ```
 */
export function amqpTarget(options: AmqpTargetOptions): RelayTarget<AmqpRoute> {
  if (typeof options !== 'object' || options === null)
    throw new InvalidOptionsError('amqpTarget: options are required: { url }.');
  checkAmqpUrl(options.url, 'amqpTarget');
  checkPositiveIntegers('amqpTarget', options, ['confirmTimeoutMs', 'maxMessageBytes', 'connectTimeoutMs']);
  return new AmqpTarget(options);
}
