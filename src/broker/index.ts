/** The broker-neutral part of relaybus/amqp and relaybus/nats (and of any future broker module). */
export { relayTo, routeValue } from './relay.js';
export type { RelayTarget, RouteValue } from './relay.js';
export { defaultMapper, HEADERS, InboxRejection } from './broker-message.js';
export type { InboundMessage, InboxMapper, MappedEvent, OutboundMessage } from './broker-message.js';
export { DEAD_LETTER_REASONS } from './dead-letter.js';
export type { DeadLetterReason } from './dead-letter.js';
export type { CommittedMessage, Inbox, InboxEventMap, InboxStopOptions } from './inbox-types.js';
export type { InboxBus } from './inbox-engine.js';
export { INBOX_DEFAULTS } from './broker-options.js';
export {
  BrokerNotFoundError,
  BrokerRejectedError,
  BrokerUnavailableError,
  MessageTooLargeError,
} from './broker-errors.js';
export type { BrokerErrorCode, BrokerRejectedErrorOptions } from './broker-errors.js';
export { isPermanentFailure, PermanentFailure } from '../core/permanent-failure.js';
