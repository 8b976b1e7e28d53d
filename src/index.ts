/**
 * relaybus: a transactional outbox and in-database event bus.
 *
 * ```ts
 * import { Type, createRelayBus, defineEvent, memoryStore } from 'relaybus';
 *
 * const OrderPlaced = defineEvent('order.placed', Type.Object({ orderId: Type.String() }));
 * const store = memoryStore();
 * const bus = createRelayBus({ store, events: [OrderPlaced] });
 * bus.on(OrderPlaced, 'send-receipt', async (order, ctx) => { ... });
 * await store.transaction((tx) => bus.publish(tx, OrderPlaced, { orderId: 'o-1' }));
 * await bus.start();
 * ```
 */
export { Type } from '@sinclair/typebox';
export type { Static, TSchema } from '@sinclair/typebox';

export { createRelayBus } from './bus/bus.js';
export type {
  Handler,
  PublishItem,
  PublishOptions,
  RelayBus,
  RelayBusState,
  StartOptions,
  TransactionalHandler,
} from './bus/bus-api.js';
export type { RelayBusHealth, StopOptions } from './dispatcher/dispatcher.js';

export { defineEvent, isEventDefinition } from './core/events.js';
export type { EventDefinition, EventPayload, PayloadIssue } from './core/events.js';

export type {
  DeadEvent,
  DeliveredEvent,
  DeliveryInfo,
  FailedEvent,
  HandlerContext,
  HandlerOptions,
  LeaseLostEvent,
  RelayBusEventMap,
  TransactionalHandlerContext,
} from './core/handlers.js';
export type { TypedEvents } from './core/emitter.js';

export {
  DEFAULT_BACKOFF,
  DEFAULT_BATCH_SIZE,
  DEFAULT_CLAIM_LOOPS,
  DEFAULT_COMPLETION_BATCH_WINDOW_MS,
  DEFAULT_CONCURRENCY,
  DEFAULT_HANDLER_TIMEOUT_MS,
  DEFAULT_LEASE_DURATION_MS,
  DEFAULT_MAX_ATTEMPTS,
  DEFAULT_POLL_INTERVAL_MS,
  DEFAULT_SETUP_STORE,
  DEFAULT_SHUTDOWN_GRACE_MS,
} from './core/options.js';
export type { DispatcherOptions } from './core/options.js';
export type { RelayBusOptions } from './bus/options.js';
export type { HandlerRunInfo, Instrumentation } from './core/instrumentation.js';

export { backoffDelayMs, decideRetry } from './core/retry-policy.js';
export type { BackoffOptions, RetryDecision } from './core/retry-policy.js';

export { adaptLogger, consoleLogger, createConsoleLogger, noopLogger } from './core/logger.js';
export type { LogFields, Logger, LogLevel } from './core/logger.js';

export { systemClock } from './core/clock.js';
export type { Clock } from './core/clock.js';

export {
  DuplicateHandlerError,
  EventConflictError,
  InvalidInputError,
  InvalidLeaseError,
  InvalidOptionsError,
  InvalidPayloadError,
  InvalidStateError,
  isRetryableError,
  RelayBusError,
  SchemaMismatchError,
  StoreUnavailableError,
  UnknownEventError,
  UnknownHandlerError,
} from './core/errors.js';
export type { RelayBusErrorCode, RelayBusErrorOptions } from './core/errors.js';
export { isPermanentFailure, PermanentFailure } from './core/permanent-failure.js';

export type {
  BuryParams,
  ClaimedDelivery,
  ClaimClock,
  ClaimHints,
  ClaimParams,
  ClaimSession,
  ClaimSessionOptions,
  CompleteAndClaimResult,
  DeliveryLease,
  DeliveryStatus,
  DeliveryView,
  LaneView,
  ExtendLeaseParams,
  ExtendLeaseResult,
  HandlerStatistics,
  ListDeliveriesParams,
  Page,
  PublishHandler,
  PublishParams,
  PublishResult,
  PurgeParams,
  PurgeResult,
  RequeueParams,
  CancelParams,
  CancelResult,
  CancelledDelivery,
  CancelOutcome,
  PauseHandlerParams,
  ResumeHandlerParams,
  PausedHandler,
  ReplayFilter,
  ReplayMode,
  ReplayParams,
  ReplayPlan,
  ReplayState,
  ReplayView,
  ReplayStepParams,
  ReplayStepResult,
  LiveWait,
  ListReplaysParams,
  RescheduleParams,
  Statistics,
  Store,
  StoreCapabilities,
  SubscribeOptions,
  Subscription,
  SubscriptionView,
  UnsubscribeParams,
  UnsubscribeResult,
} from './store/contract.js';

export {
  DEFAULT_REPLAY_BATCH_SIZE,
  DEFAULT_REPLAY_LIVE_WAIT_MS,
  DEFAULT_REPLAY_MAX_OUTSTANDING,
  DEFAULT_REPLAY_MAX_RETRIES,
  DEFAULT_REPLAY_POLL_MS,
  runReplay,
} from './replay/run-replay.js';
export type { RunReplayOptions } from './replay/run-replay.js';
export type { ReplayPaceView } from './replay/replay-pace.js';

export { memoryStore } from './memory/memory-store.js';
export type { MemoryStoreOptions, MemoryTransaction } from './memory/memory-store.js';
