/**
 * relaybus/kafka: Kafka (kafkajs) on both sides of the bus. `kafkaInbox` consumes topics as a consumer group into the
 * bus's store (the `relaybus-id` header is the event id: a redelivery is deduplicated); `relayTo(kafkaTarget(...),
 * { topic })` is a handler that produces each event (record key = ordering key) and waits for Kafka's acknowledgement.
 */
export { kafkaInbox } from './kafka-inbox.js';
export type { KafkaInboxDeclare, KafkaInboxOptions } from './kafka-inbox.js';
export { kafkaTarget } from './kafka-target.js';
export type { KafkaRoute, KafkaTargetOptions } from './kafka-target.js';
export * from '../broker/index.js';
