import type { HandlerContext } from '../core/handlers.js';
import { toOutbound, type OutboundMessage } from './broker-message.js';

/**
 * The outbound side: a handler that sends each event to a broker and completes only once the broker
 * confirmed it (RabbitMQ publisher confirm, JetStream PubAck). A broker that is down or refuses
 * makes the handler throw, so the dispatcher retries it with backoff and nothing is lost; a crash
 * after the confirm and before the completion sends it again with the same message id, which
 * JetStream's duplicate window drops and every relaybus inbox deduplicates. Keyed events keep their
 * order on the broker: keyed deliveries of one handler run one at a time, in commit order.
 */

/** A broker connection the relay sends through (`amqpTarget`, `natsTarget`). `TRoute` says where a message goes. */
export interface RelayTarget<TRoute> {
  /** For logs and errors: `amqp://guest:***@127.0.0.1:5672`. */
  readonly name: string;
  /** Send `message` to `route` and resolve once the broker confirmed it; reject otherwise (the handler then fails and retries). */
  send(message: OutboundMessage, route: TRoute, signal: AbortSignal): Promise<void>;
  /** Close the connection (a later `send` opens a new one). */
  close(): Promise<void>;
}

/** A route field: fixed, or computed from the message (its type, key, headers). */
export type RouteValue = string | ((message: OutboundMessage) => string);

/** The value of a route field for `message`. */
export function routeValue(value: RouteValue, message: OutboundMessage): string {
  return typeof value === 'function' ? value(message) : value;
}

/**
 * A handler that relays every event it receives to `target` at `route`.
 *
 * ```ts
 * const rabbit = amqpTarget({ url: process.env.AMQP_URL! });
 * bus.on(OrderPlaced, 'relay-to-rabbit', relayTo(rabbit, { exchange: 'orders', routingKey: 'order.placed' }));
 * ```
 */
export function relayTo<TRoute>(
  target: RelayTarget<TRoute>,
  route: TRoute,
): (payload: unknown, context: HandlerContext) => Promise<void> {
  return (payload, context) => target.send(toOutbound(payload, context.delivery), route, context.signal);
}
