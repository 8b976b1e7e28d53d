import type { Clock } from '../core/clock.js';
import { InvalidOptionsError } from '../core/errors.js';
import { isEventDefinition, type EventDefinition } from '../core/events.js';
import type { Instrumentation } from '../core/instrumentation.js';
import { adaptLogger, noopLogger, type Logger } from '../core/logger.js';
import {
  assertLogger,
  assertMethods,
  assertPlainObject,
  assertSchema,
  BackoffSchema,
  DEFAULT_BACKOFF,
  DEFAULT_HANDLER_TIMEOUT_MS,
  DEFAULT_MAX_ATTEMPTS,
  DEFAULT_SETUP_STORE,
  DispatcherSchema,
  integer,
  MAX_TIMER_MS,
  resolveBackoff,
  resolveDispatcherOptions,
  type DispatcherOptions,
  type ResolvedDispatcherOptions,
} from '../core/options.js';
import type { BackoffOptions } from '../core/retry-policy.js';
import type { Store } from '../store/contract.js';
import { Type } from '@sinclair/typebox';

/**
 * The options of `createRelayBus`: the store, the events and the bus-wide defaults, validated once and frozen. They
 * live with the bus rather than in core because they name the store contract (core imports nothing above it); the
 * dispatcher's and the handlers' options, which name nothing of the store, stay in core/options.ts.
 */

/** Options of `createRelayBus`. */
export interface RelayBusOptions<TTx, TEvents extends readonly EventDefinition[] = readonly EventDefinition[]> {
  /** Where events and deliveries live: `postgresStore(...)`, `memoryStore()`, ... */
  readonly store: Store<TTx>;
  /** Every event type this bus publishes or handles (at least one, unique type names). */
  readonly events: TEvents;
  /** Run `store.setup()` in `start()`. Default true; set false when migrations are applied separately. */
  readonly setupStore?: boolean;
  /** Where the library logs; silent by default. */
  readonly logger?: Logger;
  /**
   * The time passed to every store call. Leave it out in production: the store then uses the
   * database's clock, the same for every worker. Tests inject a stub clock they move by hand.
   */
  readonly clock?: Clock;
  /** Default attempt budget of a handler, 1..1 000 000. Default `DEFAULT_MAX_ATTEMPTS` (10). */
  readonly maxAttempts?: number;
  /** Default backoff of a handler; missing fields come from `DEFAULT_BACKOFF`. */
  readonly backoff?: Partial<BackoffOptions>;
  /** Default attempt timeout, 1 ms..24.8 days. Default `DEFAULT_HANDLER_TIMEOUT_MS` (60 000). */
  readonly handlerTimeoutMs?: number;
  /** Worker loop settings. */
  readonly dispatcher?: DispatcherOptions;
  /** Tracing hooks around publish and each handler call, e.g. `openTelemetry()` of `relaybus/opentelemetry`. Default: none. */
  readonly instrumentation?: Instrumentation;
}

/** `RelayBusOptions` validated, with every default applied (frozen). */
export interface ResolvedRelayBusOptions<TTx> {
  readonly store: Store<TTx>;
  /** Event definitions by type name. */
  readonly events: ReadonlyMap<string, EventDefinition>;
  readonly setupStore: boolean;
  readonly logger: Logger;
  readonly clock: Clock | undefined;
  readonly maxAttempts: number;
  readonly backoff: BackoffOptions;
  readonly handlerTimeoutMs: number;
  readonly dispatcher: ResolvedDispatcherOptions;
  readonly instrumentation: Instrumentation | undefined;
}

/** What `createRelayBus` validates its options with (exported for the reference's consistency test). */
export const BusSchema = Type.Object(
  {
    store: Type.Unknown(),
    events: Type.Unknown(),
    setupStore: Type.Optional(Type.Boolean()),
    logger: Type.Optional(Type.Unknown()),
    clock: Type.Optional(Type.Unknown()),
    maxAttempts: integer(1, 1_000_000),
    backoff: Type.Optional(BackoffSchema),
    handlerTimeoutMs: integer(1, MAX_TIMER_MS),
    dispatcher: Type.Optional(DispatcherSchema),
    instrumentation: Type.Optional(Type.Unknown()),
  },
  { additionalProperties: false },
);

/** The store methods a bus calls (the admin ones are the CLI's and the dashboard's). */
const STORE_METHODS = [
  'setup',
  'publish',
  'openClaims',
  'extendLease',
  'completeMany',
  'complete',
  'reschedule',
  'bury',
  'release',
  'transaction',
  'subscribe',
] as const;

function assertStore(store: unknown): void {
  if (typeof store !== 'object' || store === null) {
    throw new InvalidOptionsError(
      'createRelayBus: `store` is required, e.g. store: postgresStore({ ... }) or store: memoryStore().',
    );
  }
  const missing = STORE_METHODS.filter((name) => typeof (store as Record<string, unknown>)[name] !== 'function');
  const capabilities = (store as { capabilities?: unknown }).capabilities;
  if (missing.length > 0 || typeof capabilities !== 'object' || capabilities === null) {
    const what = missing.length > 0 ? `methods ${missing.join(', ')}` : 'capabilities';
    throw new InvalidOptionsError(
      `createRelayBus: \`store\` does not implement the Store contract (missing ${what}). Pass a store made by a relaybus store factory.`,
    );
  }
}

function resolveEvents(events: unknown): Map<string, EventDefinition> {
  if (!Array.isArray(events) || events.length === 0) {
    throw new InvalidOptionsError(
      'createRelayBus: `events` must list at least one event definition, e.g. events: [OrderPlaced] where OrderPlaced = defineEvent(...).',
    );
  }
  const byType = new Map<string, EventDefinition>();
  events.forEach((event: unknown, index) => {
    if (!isEventDefinition(event)) {
      throw new InvalidOptionsError(
        `createRelayBus: events[${index}] is not an event definition; create it with defineEvent(type, schema).`,
      );
    }
    if (byType.has(event.type)) {
      throw new InvalidOptionsError(
        `createRelayBus: event type "${event.type}" is listed twice in \`events\`; list each definition once.`,
      );
    }
    byType.set(event.type, event);
  });
  return byType;
}

/**
 * Validate `createRelayBus` options and apply the defaults; throws `InvalidOptionsError`.
 *
 * ```ts
 * const options = resolveRelayBusOptions({ store: memoryStore(), events: [OrderPlaced], maxAttempts: 5 });
 * ```
 */
export function resolveRelayBusOptions<TTx>(input: RelayBusOptions<TTx>): ResolvedRelayBusOptions<TTx> {
  assertPlainObject(input, 'createRelayBus options');
  assertStore(input.store);
  const events = resolveEvents(input.events);
  assertSchema(BusSchema, input, 'relaybus options', '');
  if (input.logger !== undefined) assertLogger(input.logger);
  if (input.clock !== undefined) assertMethods(input.clock, ['now'], 'clock', '{ now: () => new Date() }');
  if (input.instrumentation !== undefined) assertInstrumentation(input.instrumentation);
  return Object.freeze({
    store: input.store,
    events,
    setupStore: input.setupStore ?? DEFAULT_SETUP_STORE,
    logger: input.logger === undefined ? noopLogger : adaptLogger(input.logger),
    clock: input.clock,
    maxAttempts: input.maxAttempts ?? DEFAULT_MAX_ATTEMPTS,
    backoff: resolveBackoff(input.backoff, DEFAULT_BACKOFF, 'relaybus options: backoff'),
    handlerTimeoutMs: input.handlerTimeoutMs ?? DEFAULT_HANDLER_TIMEOUT_MS,
    dispatcher: resolveDispatcherOptions(input.dispatcher),
    instrumentation: input.instrumentation,
  });
}

/** `instrumentation` is an object whose `publish` and `runHandler`, where present, are functions. */
function assertInstrumentation(value: unknown): void {
  const hooks = value as Record<string, unknown>;
  const ok =
    typeof value === 'object' &&
    value !== null &&
    ['publish', 'runHandler'].every((name) => hooks[name] === undefined || typeof hooks[name] === 'function');
  if (!ok)
    throw new InvalidOptionsError(
      'instrumentation must be an object with optional methods publish and runHandler, e.g. openTelemetry() from relaybus/opentelemetry.',
    );
}
