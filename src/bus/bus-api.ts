/**
 * The bus's public types: the handler signatures, the options of a publish and of a start, and the `RelayBus`
 * interface that `createRelayBus` returns (implemented in bus.ts).
 */
import type { RelayBusHealth, StopOptions } from '../dispatcher/dispatcher.js';
import type { TypedEvents } from '../core/emitter.js';
import type { EventDefinition, EventPayload } from '../core/events.js';
import type {
  HandlerContext,
  HandlerOptions,
  RelayBusEventMap,
  TransactionalHandlerContext,
} from '../core/handlers.js';
import type { Logger } from '../core/logger.js';
import type { DispatcherOptions } from '../core/options.js';
import type { PublishResult, Store } from '../store/contract.js';

/** A handler of event `E`. */
export type Handler<E extends EventDefinition> = (payload: EventPayload<E>, context: HandlerContext) => unknown;

/** A `{ transactional: true }` handler of event `E`: `context.transaction` is a transaction of the store's driver. */
export type TransactionalHandler<E extends EventDefinition, TTx> = (
  payload: EventPayload<E>,
  context: TransactionalHandlerContext<TTx>,
) => unknown;

/** Options of one publish. */
export interface PublishOptions {
  /** Ordering key: deliveries of one key run one at a time per handler, in commit order. */
  readonly key?: string | null;
  /** Event id for inbox deduplication (a broker message id); generated when absent. */
  readonly id?: string;
  /** Not delivered before this instant. */
  readonly availableAt?: Date;
  /** String metadata handed to handlers as `ctx.delivery.headers`. */
  readonly headers?: Readonly<Record<string, string>>;
}

/** One event of `publishMany`; `payload` is typed by `event`. */
export type PublishItem<E extends EventDefinition> = E extends EventDefinition
  ? { readonly event: E; readonly payload: EventPayload<E>; readonly options?: PublishOptions }
  : never;

/**
 * Per-run settings of `bus.start(options)`, over the ones the bus was created with: what the
 * `relaybus worker` flags set (`--handlers`, `--concurrency`, ...).
 */
export interface StartOptions {
  /** Run only these registered handlers (default: all). Deliveries of the others wait for other workers. */
  readonly handlers?: readonly string[];
  /** Dispatcher settings for this run, over the bus's `dispatcher` options; validated the same way. */
  readonly dispatcher?: DispatcherOptions;
  /** Where this run's setup and dispatcher log, over the bus's `logger` (the CLI worker passes its own). */
  readonly logger?: Logger;
}

/** Lifecycle of a bus. */
export type RelayBusState = 'idle' | 'starting' | 'running' | 'stopping' | 'stopped';

/** A relaybus instance; see `createRelayBus`. */
export interface RelayBus<TTx, TEvent extends EventDefinition = EventDefinition> {
  /** Lifecycle events (`delivered`, `failed`, `dead`, `lease-lost`) for metrics and alerting. */
  readonly lifecycle: TypedEvents<RelayBusEventMap>;
  /** The store, for admin calls: `listDeliveries`, `statistics`, `requeue`, `purgeExpired`. */
  readonly store: Store<TTx>;
  readonly state: RelayBusState;
  /** The dispatcher's lease owner id once started. */
  readonly owner: string | undefined;

  /**
   * Register handler `name` for `event`, before `start()`. Names are unique per bus and are stored
   * with each delivery, so renaming a handler orphans its pending deliveries.
   *
   * ```ts
   * bus.on(OrderPlaced, 'send-receipt', { maxAttempts: 5, timeoutMs: 10_000 }, async (order, ctx) => {
   *   await mailer.send(order.orderId, { signal: ctx.signal });
   * });
   * ```
   */
  on<E extends TEvent>(event: E, name: string, handler: Handler<E>): void;
  on<E extends TEvent>(
    event: E,
    name: string,
    options: HandlerOptions & { readonly transactional: true },
    handler: TransactionalHandler<E, TTx>,
  ): void;
  on<E extends TEvent>(
    event: E,
    name: string,
    options: HandlerOptions & { readonly transactional?: false },
    handler: Handler<E>,
  ): void;
  on<E extends TEvent>(
    event: E,
    name: string,
    options: HandlerOptions,
    handler: (payload: EventPayload<E>, context: HandlerContext & { readonly transaction?: TTx }) => unknown,
  ): void;

  /**
   * Publish one event inside `tx`, the caller's open transaction: the event and its deliveries are
   * committed with it, or not at all. Validates the payload first; a bad payload writes nothing.
   *
   * ```ts
   * await db.transaction().execute(async (trx) => {
   *   await trx.insertInto('orders').values(order).execute();
   *   await bus.publish(trx, OrderPlaced, { orderId: order.id }, { key: order.customerId });
   * });
   * ```
   */
  publish<E extends TEvent>(
    tx: TTx,
    event: E,
    payload: EventPayload<E>,
    options?: PublishOptions,
  ): Promise<PublishResult>;

  /** Publish several events in one store call inside `tx`; results are in input order. */
  publishMany(tx: TTx, items: readonly PublishItem<TEvent>[]): Promise<PublishResult[]>;

  /** Names of the registered handlers, in registration order. */
  readonly handlers: readonly string[];

  /**
   * Run `store.setup()` (unless `setupStore: false`), then start the dispatcher. `options` narrow
   * the handlers or tune the dispatcher for this run; invalid ones reject before anything starts.
   *
   * ```ts
   * await bus.start({ handlers: ['send-receipt'], dispatcher: { concurrency: 50 } });
   * ```
   */
  start(options?: StartOptions): Promise<void>;

  /** Stop gracefully: see the dispatcher. Idempotent; `stop({ graceMs: 0 })` during a stop aborts at once. */
  stop(options?: StopOptions): Promise<void>;

  /**
   * Whether the worker reaches its store, for a readiness probe: `ready` once a claim succeeded,
   * false again after a failed claim (the dispatcher retries with backoff) or a failed setup, and
   * once stopped. `since` is when `ready` last changed; `lastError` says why it is false.
   *
   * ```ts
   * app.get('/ready', (req, res) => res.status(bus.health().ready ? 200 : 503).json(bus.health()));
   * ```
   */
  health(): RelayBusHealth;
}
