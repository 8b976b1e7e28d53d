import { Dispatcher, HealthState, type RelayBusHealth, type StopOptions } from '../dispatcher/dispatcher.js';
import type { PublishParams, PublishResult, Store } from '../store/contract.js';
import { TypedEmitter, type TypedEvents } from '../core/emitter.js';
import {
  DuplicateHandlerError,
  InvalidInputError,
  InvalidOptionsError,
  InvalidStateError,
  UnknownEventError,
  UnknownHandlerError,
} from '../core/errors.js';
import { isEventDefinition, type EventDefinition, type EventPayload } from '../core/events.js';
import type { HandlerOptions, RelayBusEventMap, ResolvedHandler } from '../core/handlers.js';
import { adaptLogger, describeError, type Logger } from '../core/logger.js';
import { nameProblem } from '../core/limits.js';
import { RESOLVED_HANDLERS, SubscriptionKeeper } from './subscription-keeper.js';
import {
  assertLogger,
  resolveDispatcherOptions,
  resolveHandlerOptions,
  type DispatcherOptions,
  type ResolvedDispatcherOptions,
} from '../core/options.js';
import { resolveRelayBusOptions, type RelayBusOptions, type ResolvedRelayBusOptions } from './options.js';
import type { PublishItem, PublishOptions, RelayBus, RelayBusState, StartOptions } from './bus-api.js';

/**
 * The bus: the API users touch. It registers handlers (`on`), publishes events inside the caller's
 * transaction (`publish`, `publishMany`) and runs the dispatcher (`start`, `stop`). It knows the
 * database only through the `Store` contract.
 *
 * Fan-out happens at publish: an event gets one delivery per handler this process registered for its
 * type, plus one per subscription in the store that it does not register itself (every started bus
 * records its handlers as subscriptions). So a process that only publishes needs the event
 * definitions, not the handlers; where both name a handler, this process's registration (its
 * `maxAttempts`) wins. Publishing a type that has neither is an error rather than a silent no-op:
 * an outbox that drops events because no worker ever ran is the bug this library exists to prevent.
 */

/** What one `start()` runs: a subset of the handlers and the dispatcher options. */
interface RunSettings<TTx> {
  readonly handlers: ReadonlyMap<string, ResolvedHandler<TTx>>;
  readonly dispatcher: ResolvedDispatcherOptions;
  readonly logger: Logger;
}

/** The options of one publish (exported for the reference's consistency test). */
export const PUBLISH_OPTION_KEYS: ReadonlySet<string> = new Set(['key', 'id', 'availableAt', 'headers']);

class Bus<TTx, TEvent extends EventDefinition> implements RelayBus<TTx, TEvent> {
  readonly #options: ResolvedRelayBusOptions<TTx>;
  readonly #emitter: TypedEmitter<RelayBusEventMap>;
  readonly #handlers = new Map<string, ResolvedHandler<TTx>>();
  readonly #handlersByType = new Map<string, ResolvedHandler<TTx>[]>();
  readonly #health = new HealthState();
  #state: RelayBusState = 'idle';
  /** The logger of the current run (`start({ logger })`), else the bus's. */
  #logger: Logger;
  #dispatcher: Dispatcher<TTx> | undefined;
  #subscriptions: SubscriptionKeeper<TTx> | undefined;
  #starting: Promise<void> | undefined;
  #stopping: Promise<void> | undefined;

  constructor(options: ResolvedRelayBusOptions<TTx>) {
    this.#options = options;
    this.#logger = options.logger;
    this.#emitter = new TypedEmitter<RelayBusEventMap>(() => this.#logger);
  }

  /** Every registered handler with its resolved options (see RESOLVED_HANDLERS). */
  get [RESOLVED_HANDLERS](): readonly ResolvedHandler<TTx>[] {
    return [...this.#handlers.values()];
  }

  get lifecycle(): TypedEvents<RelayBusEventMap> {
    return this.#emitter;
  }

  get store(): Store<TTx> {
    return this.#options.store;
  }

  get state(): RelayBusState {
    return this.#state;
  }

  get handlers(): readonly string[] {
    return [...this.#handlers.keys()];
  }

  get owner(): string | undefined {
    return this.#dispatcher?.owner;
  }

  health(): RelayBusHealth {
    return this.#health.snapshot();
  }

  on(event: TEvent, name: string, optionsOrHandler: unknown, maybeHandler?: unknown): void {
    if (this.#state !== 'idle') {
      throw new InvalidStateError(
        `bus.on("${String(name)}") was called on a ${this.#state} bus; register every handler before start().`,
      );
    }
    const definition = this.#registered(event, 'bus.on');
    const problem = nameProblem(name, 'bus.on: the handler name');
    if (problem !== undefined) throw new InvalidInputError(problem);
    const [options, fn] = maybeHandler === undefined ? [{}, optionsOrHandler] : [optionsOrHandler, maybeHandler];
    if (typeof fn !== 'function') {
      throw new InvalidInputError(
        `bus.on("${name}"): the last argument must be the handler function (payload, ctx) => ...`,
      );
    }
    const existing = this.#handlers.get(name);
    if (existing !== undefined) {
      throw new DuplicateHandlerError(
        `Handler "${name}" is already registered (for event "${existing.eventType}"). Handler names are unique per bus; pick another name, e.g. "${name}-${definition.type}".`,
      );
    }
    const resolved = resolveHandlerOptions(options as HandlerOptions, this.#options, name);
    if (resolved.transactional && !this.#options.store.capabilities.transactions) {
      throw new InvalidOptionsError(
        `Handler "${name}" is transactional, but the ${this.#options.store.kind} store has no transactions; drop { transactional: true } or use a store that supports them.`,
      );
    }
    const handler: ResolvedHandler<TTx> = Object.freeze({
      name,
      eventType: definition.type,
      ...resolved,
      fn: fn as ResolvedHandler<TTx>['fn'],
      payloadIssues: definition.checkSchema,
      ...(this.#options.instrumentation?.runHandler !== undefined
        ? { instrumentation: this.#options.instrumentation }
        : {}),
    });
    this.#handlers.set(name, handler);
    const forType = this.#handlersByType.get(definition.type) ?? [];
    forType.push(handler);
    this.#handlersByType.set(definition.type, forType);
  }

  async publish<E extends TEvent>(
    tx: TTx,
    event: E,
    payload: EventPayload<E>,
    options?: PublishOptions,
  ): Promise<PublishResult> {
    const params = this.#toPublishParams(event, payload, options, 'bus.publish');
    const [result] = await this.#write(tx, [params]);
    if (result === undefined)
      throw new InvalidStateError('The store returned no publish result; it does not follow the Store contract.');
    return result;
  }

  async publishMany(tx: TTx, items: readonly PublishItem<TEvent>[]): Promise<PublishResult[]> {
    if (!Array.isArray(items))
      throw new InvalidInputError('bus.publishMany takes an array of { event, payload, options? }.');
    const params = items.map((item: unknown, index) => {
      if (typeof item !== 'object' || item === null)
        throw new InvalidInputError(`bus.publishMany: items[${index}] must be { event, payload, options? }.`);
      const { event, payload, options } = item as { event: TEvent; payload: unknown; options?: PublishOptions };
      return this.#toPublishParams(event, payload, options, `bus.publishMany: items[${index}]`);
    });
    if (params.length === 0) return [];
    return this.#write(tx, params);
  }

  /** The store's publish, through the instrumentation's `publish` hook when there is one. */
  #write(tx: TTx, params: readonly PublishParams[]): Promise<PublishResult[]> {
    const { store, clock, instrumentation } = this.#options;
    if (instrumentation?.publish === undefined) return store.publish(tx, params, clock?.now());
    return instrumentation.publish(params, (events) => store.publish(tx, events, clock?.now()));
  }

  start(options?: StartOptions): Promise<void> {
    if (this.#state !== 'idle') {
      return Promise.reject(
        new InvalidStateError(`bus.start() was called on a ${this.#state} bus; a bus starts once.`),
      );
    }
    if (this.#handlers.size === 0) {
      return Promise.reject(
        new InvalidStateError(
          'bus.start(): no handler is registered; register them with bus.on(...) first. A bus that only publishes does not need start().',
        ),
      );
    }
    let run: RunSettings<TTx>;
    try {
      run = this.#runSettings(options);
    } catch (error) {
      return Promise.reject(error);
    }
    this.#state = 'starting';
    this.#starting = this.#start(run);
    return this.#starting;
  }

  /** The handlers and dispatcher options of this run: the bus's, narrowed and overridden by `options`. */
  #runSettings(options: StartOptions | undefined): RunSettings<TTx> {
    if (options === undefined)
      return { handlers: this.#handlers, dispatcher: this.#options.dispatcher, logger: this.#options.logger };
    if (typeof options !== 'object' || options === null || Array.isArray(options)) {
      throw new InvalidInputError('bus.start(options): options must be an object { handlers?, dispatcher?, logger? }.');
    }
    if (options.logger !== undefined) assertLogger(options.logger, 'bus.start({ logger })');
    let handlers: ReadonlyMap<string, ResolvedHandler<TTx>> = this.#handlers;
    if (options.handlers !== undefined) {
      if (!Array.isArray(options.handlers) || options.handlers.length === 0) {
        throw new InvalidInputError(
          'bus.start({ handlers }): list at least one registered handler name, or leave handlers out to run them all.',
        );
      }
      const unknown = options.handlers.filter((name) => !this.#handlers.has(name));
      if (unknown.length > 0) {
        throw new UnknownHandlerError(
          `bus.start({ handlers }): ${unknown.map((name) => JSON.stringify(name)).join(', ')} ${unknown.length === 1 ? 'is' : 'are'} not registered; this bus has ${[...this.#handlers.keys()].join(', ')}.`,
        );
      }
      handlers = new Map(options.handlers.map((name) => [name, this.#handlers.get(name)!]));
    }
    const base = Object.fromEntries(
      Object.entries(this.#options.dispatcher).filter(([, value]) => value !== undefined),
    ) as DispatcherOptions;
    const dispatcher =
      options.dispatcher === undefined
        ? this.#options.dispatcher
        : resolveDispatcherOptions({ ...base, ...options.dispatcher });
    return {
      handlers,
      dispatcher,
      logger: options.logger === undefined ? this.#options.logger : adaptLogger(options.logger),
    };
  }

  async #start(run: RunSettings<TTx>): Promise<void> {
    const { store, setupStore } = this.#options;
    const { logger } = run;
    this.#logger = logger;
    try {
      if (setupStore) await store.setup();
    } catch (error) {
      throw this.#startFailed(error, 'store setup failed', logger);
    }
    // Publishers in any process fan out to these handlers from now on (the subscriptions in the store).
    const subscriptions = new SubscriptionKeeper(store, run.handlers.values(), this.#options.clock, logger);
    try {
      await subscriptions.start();
    } catch (error) {
      throw this.#startFailed(error, 'recording the subscriptions failed', logger);
    }
    this.#subscriptions = subscriptions;
    const dispatcher = new Dispatcher<TTx>({
      store,
      handlers: run.handlers,
      options: run.dispatcher,
      logger,
      clock: this.#options.clock,
      emitter: this.#emitter,
      health: this.#health,
    });
    this.#dispatcher = dispatcher;
    dispatcher.start();
    if (this.#state === 'starting') this.#state = 'running';
  }

  /** A start-up step failed: the bus can be started again; returns the error for start() to reject with. */
  #startFailed(error: unknown, what: string, logger: Logger): unknown {
    if (this.#state === 'starting') this.#state = 'idle';
    this.#health.markUnready(describeError(error));
    // The caller gets the error from start(); logged at debug only so that a caller retrying start() is not reported twice.
    logger.debug(`${what}; the bus did not start`, { error: describeError(error) });
    return error;
  }

  stop(options?: StopOptions): Promise<void> {
    if (this.#state === 'idle' || this.#state === 'stopped') return Promise.resolve();
    if (this.#stopping !== undefined) {
      void this.#dispatcher?.stop(options);
      return this.#stopping;
    }
    this.#state = 'stopping';
    this.#stopping = (async () => {
      try {
        await this.#starting;
      } catch {
        // start failed: nothing runs
      }
      this.#subscriptions?.stop();
      await this.#dispatcher?.stop(options);
      this.#state = 'stopped';
    })();
    return this.#stopping;
  }

  /** The bus's definition of `event`, or UnknownEventError. */
  #registered(event: unknown, where: string): EventDefinition {
    if (!isEventDefinition(event)) {
      throw new UnknownEventError(
        `${where}: expected an event definition made by defineEvent(type, schema), got ${describeError(event)}.`,
      );
    }
    const definition = this.#options.events.get(event.type);
    if (definition === undefined) {
      throw new UnknownEventError(
        `${where}: event type "${event.type}" is not one of this bus's events; add it to createRelayBus({ events: [...] }).`,
      );
    }
    if (definition !== event) {
      throw new UnknownEventError(
        `${where}: this definition of "${event.type}" is not the one the bus was created with (two defineEvent calls for one type?); import and use the same definition.`,
      );
    }
    return definition;
  }

  #toPublishParams(
    event: unknown,
    payload: unknown,
    options: PublishOptions | undefined,
    where: string,
  ): PublishParams {
    const definition = this.#registered(event, where);
    // The handlers this process registers (possibly none): the store adds the subscriptions of the type.
    const handlers = this.#handlersByType.get(definition.type) ?? [];
    definition.validate(payload);
    if (options !== undefined) {
      if (typeof options !== 'object' || options === null)
        throw new InvalidInputError(`${where}: options must be { key?, id?, availableAt?, headers? }.`);
      const unknown = Object.keys(options).filter((name) => !PUBLISH_OPTION_KEYS.has(name));
      if (unknown.length > 0)
        throw new InvalidInputError(
          `${where}: unknown publish option ${unknown.map((name) => `"${name}"`).join(', ')}; the options are key, id, availableAt, headers.`,
        );
    }
    return {
      type: definition.type,
      payload,
      handlers: handlers.map((handler) => ({ name: handler.name, maxAttempts: handler.maxAttempts })),
      ...(options?.id !== undefined ? { id: options.id } : {}),
      ...(options?.key !== undefined ? { key: options.key } : {}),
      ...(options?.headers !== undefined ? { headers: options.headers } : {}),
      ...(options?.availableAt !== undefined ? { availableAt: options.availableAt } : {}),
    };
  }
}

/**
 * Create a bus over a store and a list of event definitions.
 *
 * ```ts
 * import { Type, createRelayBus, defineEvent, memoryStore } from 'relaybus';
 *
 * const OrderPlaced = defineEvent('order.placed', Type.Object({ orderId: Type.String() }));
 * const store = memoryStore();
 * const bus = createRelayBus({ store, events: [OrderPlaced], dispatcher: { concurrency: 20 } });
 *
 * bus.on(OrderPlaced, 'send-receipt', async (order, ctx) => {
 *   await mailer.send(order.orderId, { signal: ctx.signal });
 * });
 * bus.on(OrderPlaced, 'count-orders', { transactional: true }, async (order, ctx) => {
 *   await incrementCounter(ctx.transaction, order.orderId); // commits with the completion
 * });
 *
 * await store.transaction((tx) => bus.publish(tx, OrderPlaced, { orderId: 'o-1' }, { key: 'customer-7' }));
 * await bus.start();
 * // ...
 * await bus.stop();
 * ```
 *
 * Throws `InvalidOptionsError` for missing or out-of-range options.
 */
export function createRelayBus<TTx, const TEvents extends readonly EventDefinition[]>(
  options: RelayBusOptions<TTx, TEvents>,
): RelayBus<TTx, TEvents[number]> {
  return new Bus<TTx, TEvents[number]>(resolveRelayBusOptions<TTx>(options));
}
