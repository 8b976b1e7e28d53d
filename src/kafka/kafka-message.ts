import type { IHeaders, KafkaMessage, Message } from 'kafkajs';
import { applicationHeaders, HEADERS, type InboundMessage, type OutboundMessage } from '../broker/broker-message.js';

/**
 * Relay messages in Kafka's terms. Kafka has no message id: the relay writes the event id in the `relaybus-id` header
 * (and its type, key and publish time in the other `relaybus-*` headers); the record key is the event's ordering key,
 * so one key's events go to one partition, in order. Inbound, a record without `relaybus-key` is keyed by its
 * record key (a producer other than the relay keys its records that way).
 */

/** One header value as text: kafkajs hands Buffers (or lists of them for repeated names). */
function headerText(value: IHeaders[string]): string | undefined {
  const first = Array.isArray(value) ? value[0] : value;
  if (first === undefined) return undefined;
  return typeof first === 'string' ? first : first.toString('utf8');
}

/** A consumed record as the inbox sees it. */
export function inboundOf(record: KafkaMessage, topic: string, partition: number): InboundMessage {
  const raw = record.headers ?? {};
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(raw)) {
    const text = headerText(value);
    if (text !== undefined) flat[name] = text;
  }
  const lower = new Map(Object.entries(flat).map(([name, value]) => [name.toLowerCase(), value]));
  const recordKey = record.key === null || record.key === undefined ? null : record.key.toString('utf8');
  return {
    id: lower.get(HEADERS.id),
    type: lower.get(HEADERS.type),
    key: lower.get(HEADERS.key) ?? recordKey,
    headers: applicationHeaders(flat, () => false),
    body: record.value ?? new Uint8Array(),
    redelivered: false,
    source: `topic ${topic} partition ${partition} offset ${record.offset}`,
  };
}

/** The record the relay sends for `message`. */
export function recordOf(message: OutboundMessage): Message {
  const headers: Record<string, string> = { ...message.headers };
  headers[HEADERS.id] = message.id;
  headers[HEADERS.type] = message.type;
  headers[HEADERS.createdAt] = message.createdAt.toISOString();
  if (message.key !== null) headers[HEADERS.key] = message.key;
  return {
    key: message.key,
    value: message.body,
    headers,
    timestamp: String(message.createdAt.getTime()),
  };
}
