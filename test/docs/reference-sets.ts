/**
 * What the code has that the reference pages (docs/reference/) must document, as test/docs/reference.test.ts reads
 * it: the option names of every options type, by the `##` section of docs/reference/configuration.md that documents
 * them, and the lifecycle events with their payload fields.
 *
 * These types have no runtime form, so each list here is a `Keys<T>` record: the compiler (`tsc --noEmit`, part of
 * `npm test`) refuses it while it misses a key of `T` or names one `T` lacks. When it does, an option or event was
 * added, renamed or removed: change the record here, then document it in its reference page (the test then says
 * where). Where the code validates with a runtime list (TypeBox schemas, the publish option keys), the test compares
 * with that list too.
 */
import type {
  AmqpDeadLetter,
  AmqpInboxDeclare,
  AmqpInboxOptions,
  AmqpRoute,
  AmqpTargetOptions,
} from '../../src/amqp/index.js';
import type { FromDrizzleOptions } from '../../src/postgres/drivers/drizzle-driver.js';
import type { KafkaInboxDeclare, KafkaInboxOptions, KafkaRoute, KafkaTargetOptions } from '../../src/kafka/index.js';
import type { FromKyselyOptions } from '../../src/postgres/drivers/kysely-driver.js';
import type { NatsInboxDeclare, NatsInboxOptions, NatsRoute, NatsTargetOptions } from '../../src/nats/index.js';
import type { RelayBusTelemetry, OpenTelemetryOptions } from '../../src/telemetry/opentelemetry.js';
import type {
  FromPgliteOptions,
  FromPgOptions,
  FromPostgresJsOptions,
  PostgresStoreOptions,
} from '../../src/postgres/index.js';
import type {
  BackoffOptions,
  DeliveryInfo,
  DispatcherOptions,
  HandlerOptions,
  MemoryStoreOptions,
  PublishOptions,
  RelayBusEventMap,
  RunReplayOptions,
  RelayBusOptions,
  StartOptions,
  StopOptions,
} from '../../src/index.js';
import type { InboxEventMap, InboxStopOptions } from '../../src/broker/index.js';
import type { InboxOptionsBase } from '../../src/broker/broker-options.js';

/** Every key of `T`, optional ones included, and no other. */
export type Keys<T> = { readonly [K in keyof Required<T>]: true };

/** The names of `record`, each after `prefix` (`dispatcher.`). */
function names<T>(record: Keys<T>, prefix = ''): string[] {
  return Object.keys(record).map((name) => `${prefix}${name}`);
}

type InboxOwn<T> = Omit<T, keyof InboxOptionsBase<unknown>>;

export const BACKOFF_KEYS = names<BackoffOptions>({
  initialDelayMs: true,
  maxDelayMs: true,
  multiplier: true,
  jitter: true,
});
export const DISPATCHER_KEYS = names<DispatcherOptions>({
  concurrency: true,
  batchSize: true,
  pollIntervalMs: true,
  leaseDurationMs: true,
  completionBatchWindowMs: true,
  shutdownGraceMs: true,
  ownerPrefix: true,
  claimLoops: true,
  followers: true,
});
export const BUS_KEYS = names<RelayBusOptions<unknown>>({
  store: true,
  events: true,
  setupStore: true,
  logger: true,
  clock: true,
  maxAttempts: true,
  backoff: true,
  handlerTimeoutMs: true,
  dispatcher: true,
  instrumentation: true,
});
export const HANDLER_KEYS = names<HandlerOptions>({
  transactional: true,
  maxAttempts: true,
  backoff: true,
  timeoutMs: true,
});
export const PUBLISH_KEYS = names<PublishOptions>({ key: true, id: true, availableAt: true, headers: true });

/** One `##` section of docs/reference/configuration.md: the options it documents, and the exported types they come from. */
export interface OptionGroup {
  readonly heading: string;
  readonly options: readonly string[];
  /** The exported options types this section documents (every exported `...Options` type is in one group or excused). */
  readonly types: readonly string[];
}

export const OPTION_GROUPS: readonly OptionGroup[] = [
  {
    heading: 'createRelayBus',
    options: [
      ...BUS_KEYS,
      ...BACKOFF_KEYS.map((name) => `backoff.${name}`),
      ...DISPATCHER_KEYS.map((name) => `dispatcher.${name}`),
    ],
    types: ['RelayBusOptions', 'BackoffOptions', 'DispatcherOptions'],
  },
  { heading: 'bus.on', options: HANDLER_KEYS, types: ['HandlerOptions'] },
  { heading: 'bus.publish', options: PUBLISH_KEYS, types: ['PublishOptions'] },
  {
    heading: 'bus.start',
    options: names<StartOptions>({ handlers: true, dispatcher: true, logger: true }),
    types: ['StartOptions'],
  },
  { heading: 'bus.stop', options: names<StopOptions>({ graceMs: true }), types: ['StopOptions'] },
  {
    heading: 'postgresStore',
    options: names<PostgresStoreOptions<unknown>>({
      driver: true,
      schema: true,
      completionHistory: true,
      keepEvents: true,
      notify: true,
      holdClaimConnections: true,
    }),
    types: ['PostgresStoreOptions'],
  },
  {
    heading: 'fromPg',
    options: names<FromPgOptions>({ preparedStatements: true, closeWithStore: true }),
    types: ['FromPgOptions'],
  },
  {
    heading: 'fromPostgresJs',
    options: names<FromPostgresJsOptions>({ preparedStatements: true, closeWithStore: true }),
    types: ['FromPostgresJsOptions'],
  },
  {
    heading: 'fromKysely',
    options: names<FromKyselyOptions>({ pool: true, concurrentConnections: true, closeWithStore: true }),
    types: ['FromKyselyOptions'],
  },
  {
    heading: 'fromDrizzle',
    options: names<FromDrizzleOptions>({ concurrentConnections: true }),
    types: ['FromDrizzleOptions'],
  },
  { heading: 'fromPglite', options: names<FromPgliteOptions>({ closeWithStore: true }), types: ['FromPgliteOptions'] },
  {
    heading: 'memoryStore',
    options: names<MemoryStoreOptions>({ completionHistory: true }),
    types: ['MemoryStoreOptions'],
  },
  {
    heading: 'amqpTarget',
    options: names<AmqpTargetOptions>({
      url: true,
      confirmTimeoutMs: true,
      maxMessageBytes: true,
      connectTimeoutMs: true,
      connectionName: true,
      logger: true,
    }),
    types: ['AmqpTargetOptions'],
  },
  {
    heading: 'natsTarget',
    options: names<NatsTargetOptions>({
      servers: true,
      timeoutMs: true,
      connectTimeoutMs: true,
      connectionName: true,
      logger: true,
    }),
    types: ['NatsTargetOptions'],
  },
  {
    heading: 'kafkaTarget',
    options: names<KafkaTargetOptions>({ brokers: true, clientId: true, connectTimeoutMs: true, timeoutMs: true }),
    types: ['KafkaTargetOptions'],
  },
  {
    heading: 'relayTo',
    options: [
      ...names<AmqpRoute>({ exchange: true, routingKey: true }),
      ...names<NatsRoute>({ subject: true }),
      ...names<KafkaRoute>({ topic: true }),
    ],
    types: [],
  },
  {
    heading: 'Inbox options',
    options: names<InboxOptionsBase<unknown>>({
      bus: true,
      events: true,
      map: true,
      batchSize: true,
      concurrency: true,
      shutdownGraceMs: true,
      connectTimeoutMs: true,
      setupStore: true,
      logger: true,
    }),
    types: [],
  },
  {
    heading: 'amqpInbox',
    options: [
      ...names<InboxOwn<AmqpInboxOptions<unknown>>>({
        url: true,
        queue: true,
        deadLetter: true,
        declare: true,
        prefetch: true,
        connectionName: true,
      }),
      ...names<AmqpDeadLetter>({ exchange: true, routingKey: true }, 'deadLetter.'),
      ...names<AmqpInboxDeclare>({ bindings: true, deadLetterQueue: true, singleActiveConsumer: true }, 'declare.'),
    ],
    types: ['AmqpInboxOptions'],
  },
  {
    heading: 'natsInbox',
    options: [
      ...names<InboxOwn<NatsInboxOptions<unknown>>>({
        servers: true,
        stream: true,
        consumer: true,
        deadLetter: true,
        declare: true,
        maxAckPending: true,
        ackWaitMs: true,
        connectionName: true,
      }),
      ...names<NonNullable<NatsInboxOptions<unknown>['deadLetter']>>({ subject: true }, 'deadLetter.'),
      ...names<NatsInboxDeclare>({ subjects: true, filterSubject: true }, 'declare.'),
    ],
    types: ['NatsInboxOptions'],
  },
  {
    heading: 'kafkaInbox',
    options: [
      ...names<InboxOwn<KafkaInboxOptions<unknown>>>({
        brokers: true,
        topics: true,
        groupId: true,
        deadLetter: true,
        declare: true,
        fromBeginning: true,
        clientId: true,
      }),
      ...names<NonNullable<KafkaInboxOptions<unknown>['deadLetter']>>({ topic: true }, 'deadLetter.'),
      ...names<KafkaInboxDeclare>({ partitions: true, replicationFactor: true }, 'declare.'),
    ],
    types: ['KafkaInboxOptions'],
  },
  { heading: 'inbox.stop', options: names<InboxStopOptions>({ graceMs: true }), types: ['InboxStopOptions'] },
  {
    heading: 'openTelemetry',
    options: names<OpenTelemetryOptions>({ tracer: true, meter: true }),
    types: ['OpenTelemetryOptions'],
  },
  {
    heading: 'telemetry.observe',
    options: names<NonNullable<Parameters<RelayBusTelemetry['observe']>[1]>>({
      meter: true,
      statisticsIntervalMs: true,
      logger: true,
    }),
    types: ['ObserveBusOptions'],
  },
  {
    heading: 'runReplay',
    options: names<RunReplayOptions>({
      batchSize: true,
      maxOutstanding: true,
      rate: true,
      liveWaitMs: true,
      pollMs: true,
      onProgress: true,
      signal: true,
      logger: true,
      maxRetries: true,
    }),
    types: ['RunReplayOptions'],
  },
];

/**
 * Exported `...Options` types that are not configuration a user passes, and why: the test fails on an exported
 * options type that is neither in a group above nor here.
 */
export const NOT_CONFIGURATION: Readonly<Record<string, string>> = {
  RelayBusErrorOptions: 'the constructor options of the error classes (docs/reference/errors.md)',
  BrokerRejectedErrorOptions: 'the constructor options of BrokerRejectedError (docs/reference/errors.md)',
  ClaimSessionOptions: 'a parameter of the Store contract (store.openClaims), for custom workers',
  SubscribeOptions: 'a parameter of the Store contract (store.subscribe), called by the bus',
};

/** The events of `bus.lifecycle`, each with its payload's fields. */
export const BUS_EVENTS: { readonly [E in keyof RelayBusEventMap]: Keys<RelayBusEventMap[E]> } = {
  delivered: { delivery: true, durationMs: true },
  failed: { delivery: true, error: true, durationMs: true, retryAt: true },
  dead: { delivery: true, error: true, durationMs: true },
  'lease-lost': { delivery: true, detectedBy: true },
};

/** The events of `inbox.lifecycle`, each with its payload's fields. */
export const INBOX_EVENTS: { readonly [E in keyof InboxEventMap]: Keys<InboxEventMap[E]> } = {
  committed: { messages: true },
  'dead-lettered': { message: true, reason: true, detail: true },
  retrying: { error: true, delayMs: true, attempt: true, messages: true },
  connected: { broker: true, reconnect: true },
  'held-back': { outstanding: true, ackWaitMs: true },
  disconnected: { broker: true, error: true, retryInMs: true },
};

/** The fields of `delivery` in the bus's events (`DeliveryInfo`). */
export const DELIVERY_FIELDS = names<DeliveryInfo>({
  id: true,
  eventId: true,
  eventType: true,
  handler: true,
  key: true,
  sequence: true,
  attempt: true,
  maxAttempts: true,
  headers: true,
  createdAt: true,
});
