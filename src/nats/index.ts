/**
 * relaybus/nats: NATS JetStream on both sides of the bus. `natsInbox` consumes a durable consumer
 * into the bus's store (message id = event id: a redelivery is deduplicated); `relayTo(natsTarget(...),
 * { subject })` is a handler that publishes each event with `Nats-Msg-Id` and waits for the PubAck.
 */
export { natsInbox } from './nats-inbox.js';
export type { NatsInboxDeclare, NatsInboxOptions } from './nats-inbox.js';
export { NATS_HEADERS, natsTarget } from './nats-target.js';
export type { NatsRoute, NatsTargetOptions } from './nats-target.js';
export * from '../broker/index.js';
