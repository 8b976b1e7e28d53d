import type { EventDefinition } from '../core/events.js';
import type { DeliveryInfo } from '../core/handlers.js';
import type { DeadLetterReason } from './dead-letter.js';

/**
 * The broker-neutral shape of a message, both ways. The relay turns a delivery of an event into an
 * `OutboundMessage` (message id = event id, the event type, its ordering key, its headers, the JSON
 * payload); each broker module writes it in its own terms (AMQP properties and headers, NATS
 * headers). The inbox reads a broker message back into an `InboundMessage`, and a mapper turns that
 * into the event to publish (`defaultMapper`: the relay's own format).
 */

/** Header names the relay writes and the default mapper reads (AMQP also sets `messageId` and `type`). */
export const HEADERS = Object.freeze({
  /** The event id, for a broker without a message id of its own (Kafka). */
  id: 'relaybus-id',
  /** The event type (`order.placed`). */
  type: 'relaybus-type',
  /** The ordering key; absent for unkeyed events. */
  key: 'relaybus-key',
  /** The event's publish time in A, ISO 8601. */
  createdAt: 'relaybus-created-at',
  /** Set on a dead-lettered copy: why (a `DeadLetterReason`). */
  deadReason: 'relaybus-dead-reason',
  /** Set on a dead-lettered copy: the error message. */
  deadDetail: 'relaybus-dead-detail',
  /** Set on a dead-lettered copy: where it was consumed from. */
  deadSource: 'relaybus-dead-source',
});

const RESERVED_PREFIX = 'relaybus-';

/** A message as the relay sends it. */
export interface OutboundMessage {
  /** The event id: the broker's message id (JetStream deduplicates on it, the inbox too). */
  readonly id: string;
  readonly type: string;
  readonly key: string | null;
  /** The event's headers (never a `relaybus-*` name: those are the relay's). */
  readonly headers: Readonly<Record<string, string>>;
  /** JSON of the payload. */
  readonly body: Buffer;
  readonly createdAt: Date;
}

/** A message as the inbox received it, whatever the broker. */
export interface InboundMessage {
  /** The message id (AMQP `messageId`, JetStream `Nats-Msg-Id`); undefined when the producer set none. */
  readonly id: string | undefined;
  /** The event type (AMQP `type` or the `relaybus-type` header). */
  readonly type: string | undefined;
  /** The `relaybus-key` header, or null. */
  readonly key: string | null;
  /** The application's string headers: broker bookkeeping and `relaybus-*` names left out. */
  readonly headers: Readonly<Record<string, string>>;
  readonly body: Uint8Array;
  /** True when the broker says it delivered this message before. */
  readonly redelivered: boolean;
  /** Where it came from, for logs: `queue orders-b`, `stream ORDERS seq 42`. */
  readonly source: string;
}

/** What a mapper makes of a message: the event to publish in the inbox's transaction. */
export interface MappedEvent {
  readonly event: EventDefinition;
  readonly payload: unknown;
  /** The event id; default the message id. */
  readonly id?: string;
  /** Ordering key; default the message's key. */
  readonly key?: string | null;
  readonly headers?: Readonly<Record<string, string>>;
}

/** Turns a message into the event to publish, or throws `InboxRejection` to dead-letter it. */
export type InboxMapper = (message: InboundMessage) => MappedEvent;

/** Thrown by a mapper: the message goes to the dead-letter route with this reason and detail. */
export class InboxRejection extends Error {
  override readonly name = 'InboxRejection';
  readonly reason: DeadLetterReason;
  constructor(reason: DeadLetterReason, message: string) {
    super(message);
    this.reason = reason;
  }
}

/** The message the relay sends for one delivery of an event. */
export function toOutbound(payload: unknown, delivery: DeliveryInfo): OutboundMessage {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(delivery.headers)) {
    if (!name.toLowerCase().startsWith(RESERVED_PREFIX)) headers[name] = value;
  }
  return {
    id: delivery.eventId,
    type: delivery.eventType,
    key: delivery.key,
    headers,
    body: Buffer.from(JSON.stringify(payload)),
    createdAt: delivery.createdAt,
  };
}

/** Keep the application's string headers of a broker message: drop `relaybus-*` and the names `dropped` says. */
export function applicationHeaders(
  raw: Readonly<Record<string, unknown>> | undefined,
  dropped: (name: string) => boolean,
): Record<string, string> {
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(raw ?? {})) {
    const lower = name.toLowerCase();
    if (lower.startsWith(RESERVED_PREFIX) || dropped(lower)) continue;
    if (typeof value === 'string') headers[name] = value;
    else if (Buffer.isBuffer(value)) headers[name] = value.toString('utf8');
    else if (typeof value === 'number' || typeof value === 'boolean') headers[name] = String(value);
  }
  return headers;
}

/**
 * The mapper for messages the relay sent: the event type names one of `events`, the body is the
 * JSON payload, the key and headers come along. An unknown type, a body that is not JSON, or a
 * missing id is rejected (the payload's schema is checked when the inbox publishes).
 *
 * ```ts
 * amqpInbox({ bus, url, queue: 'orders-b', map: defaultMapper([OrderPlaced]) }); // the default when `events` is given
 * ```
 */
export function defaultMapper(events: readonly EventDefinition[]): InboxMapper {
  const byType = new Map(events.map((event) => [event.type, event]));
  return (message) => {
    if (message.type === undefined || message.type === '') {
      throw new InboxRejection(
        'unknown-type',
        `the message has no event type (AMQP "type" property or "${HEADERS.type}" header)`,
      );
    }
    const event = byType.get(message.type);
    if (event === undefined) {
      throw new InboxRejection(
        'unknown-type',
        `event type "${message.type}" is not one of the inbox's events (${[...byType.keys()].join(', ')})`,
      );
    }
    let payload: unknown;
    try {
      payload = JSON.parse(Buffer.from(message.body).toString('utf8'));
    } catch (error) {
      throw new InboxRejection('malformed', `the body is not JSON: ${(error as Error).message}`);
    }
    return { event, payload };
  };
}
