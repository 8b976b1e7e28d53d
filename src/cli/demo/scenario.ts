import {
  createRelayBus,
  defineEvent,
  Type,
  type HandlerContext,
  type Logger,
  type RelayBus,
  type Store,
} from '../../index.js';

/**
 * The demo's sample domain: keyed `order.placed` events (the key is the customer) with three
 * handlers. `reserve-stock` always succeeds; `update-ledger` fails the first two attempts of every
 * hundredth order (retries with backoff); `send-receipt` always fails for one order, which becomes
 * the one dead letter. Every handler checks that deliveries of one customer reach it one at a
 * time, in publish order.
 */

/** The sample event. */
export const OrderPlaced = defineEvent(
  'order.placed',
  Type.Object({
    orderId: Type.String({ minLength: 1 }),
    customerId: Type.String({ minLength: 1 }),
    totalCents: Type.Integer({ minimum: 0 }),
  }),
);

/** Handler names, in the order they are registered. */
export const DEMO_HANDLERS = ['send-receipt', 'reserve-stock', 'update-ledger'] as const;

/** What the demo publishes and which orders misbehave. */
export interface DemoPlan {
  readonly events: number;
  readonly customers: number;
  /** The order whose receipt always bounces: the one dead letter. */
  readonly poisonOrder: string;
}

/** What the handlers observed. */
export interface DemoTally {
  /** Attempts that ran a handler (including failed ones). */
  attempts: number;
  /** A delivery of a customer ran while another of the same customer and handler ran, or out of publish order. */
  orderViolations: number;
}

const FLAKY_EVERY = 100;
const FLAKY_AT = 50;

/** The order id of the `index`th published order. */
export function orderId(index: number): string {
  return `o-${String(index).padStart(5, '0')}`;
}

/** The plan for `events` orders: about one customer per seven orders (at least one), one poison order. */
export function demoPlan(events: number): DemoPlan {
  let poison = Math.floor(events / 2);
  if (poison % FLAKY_EVERY === FLAKY_AT) poison += 1;
  return { events, customers: Math.max(1, Math.ceil(events / 7)), poisonOrder: orderId(Math.min(poison, events - 1)) };
}

/** The `index`th order of the plan. */
export function demoOrder(plan: DemoPlan, index: number): { orderId: string; customerId: string; totalCents: number } {
  return {
    orderId: orderId(index),
    customerId: `customer-${String(index % plan.customers).padStart(4, '0')}`,
    totalCents: 500 + ((index * 7919) % 20_000),
  };
}

/** True for the orders whose ledger update fails twice before it succeeds. */
function isFlaky(order: string): boolean {
  return Number(order.slice(2)) % FLAKY_EVERY === FLAKY_AT;
}

/**
 * The demo bus over `store`, with fast retries (100 ms, 200 ms, ...) and a dispatcher sized for a
 * single-connection embedded database.
 */
export function createDemoBus<TTx>(
  store: Store<TTx>,
  plan: DemoPlan,
  logger: Logger,
): { bus: RelayBus<TTx, typeof OrderPlaced>; tally: DemoTally } {
  const bus = createRelayBus({
    store,
    events: [OrderPlaced],
    setupStore: false,
    logger,
    backoff: { initialDelayMs: 100, maxDelayMs: 400, multiplier: 2, jitter: 0 },
    dispatcher: {
      concurrency: 200,
      batchSize: 200,
      pollIntervalMs: 50,
      completionBatchWindowMs: 5,
      shutdownGraceMs: 2_000,
    },
  });
  const tally: DemoTally = { attempts: 0, orderViolations: 0 };
  const lastDone = new Map<string, bigint>();
  const running = new Set<string>();

  /** Run `work` as handler `name`, checking per-customer order: one at a time, sequence increasing. */
  const ordered = async (name: string, context: HandlerContext, work: () => void | Promise<void>): Promise<void> => {
    tally.attempts += 1;
    const slot = `${name}/${context.delivery.key}`;
    const sequence = BigInt(context.delivery.sequence ?? '0');
    if (running.has(slot) || (lastDone.get(slot) ?? -1n) >= sequence) tally.orderViolations += 1;
    running.add(slot);
    try {
      await work();
      lastDone.set(slot, sequence);
    } finally {
      running.delete(slot);
    }
  };

  bus.on(OrderPlaced, 'send-receipt', { maxAttempts: 3 }, (order, context) =>
    ordered('send-receipt', context, () => {
      if (order.orderId === plan.poisonOrder)
        throw new Error(
          `the mail server rejected the receipt of ${order.orderId}: mailbox of ${order.customerId} does not exist`,
        );
    }),
  );
  bus.on(OrderPlaced, 'reserve-stock', { maxAttempts: 5 }, (_order, context) =>
    ordered('reserve-stock', context, () => undefined),
  );
  bus.on(OrderPlaced, 'update-ledger', { maxAttempts: 5 }, (order, context) =>
    ordered('update-ledger', context, () => {
      if (isFlaky(order.orderId) && context.delivery.attempt <= 2)
        throw new Error(`ledger is busy (simulated timeout) for ${order.orderId}; retrying`);
    }),
  );
  return { bus, tally };
}
