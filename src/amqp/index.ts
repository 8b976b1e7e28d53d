/**
 * relaybus/amqp: RabbitMQ (amqplib) on both sides of the bus. `amqpInbox` consumes a queue into the
 * bus's store (message id = event id: a redelivery is deduplicated); `relayTo(amqpTarget(...), route)`
 * is a handler that publishes each event with publisher confirms.
 */
export { amqpInbox } from './amqp-inbox.js';
export type { AmqpDeadLetter, AmqpInboxDeclare, AmqpInboxOptions } from './amqp-inbox.js';
export { AMQP_DEFAULT_MAX_MESSAGE_BYTES, amqpTarget } from './amqp-target.js';
export type { AmqpRoute, AmqpTargetOptions } from './amqp-target.js';
export * from '../broker/index.js';
