/**
 * The relaybus tables as Drizzle `pg-core` definitions: the single source of truth of the Postgres
 * layout. drizzle-kit generates `schema/migrations/` from this file; `setup()` applies those
 * migrations plus `postgres-supplement.sql` (what drizzle-kit cannot express). Users add this module
 * to their own `drizzle.config.ts` (`relaybus/schema`) so their migrations include these tables.
 *
 * Indexes on `relaybus_deliveries` cover only columns that no happy-path statement writes: a
 * delivery is inserted at publish and deleted at completion, and the claim writes lane rows only.
 */
import { sql } from 'drizzle-orm';
import {
  bigint,
  boolean,
  check,
  index,
  integer,
  jsonb,
  pgSchema,
  primaryKey,
  smallint,
  text,
  timestamp,
} from 'drizzle-orm/pg-core';

/** The Postgres schema the tables live in; `postgresStore({ schema })` renders them into another name. */
export const relaybusSchema = pgSchema('relaybus');

const instant = (name: string) => timestamp(name, { withTimezone: true, mode: 'date' });

/** One row per published event; `handlers` lists every handler the event ever had a delivery for (inbox dedup). */
export const relaybusEvents = relaybusSchema.table('relaybus_events', {
  id: text('id').primaryKey(),
  type: text('type').notNull(),
  key: text('key'),
  payload: jsonb('payload').notNull(),
  headers: jsonb('headers').notNull(),
  handlers: text('handlers').array().notNull(),
  createdAt: instant('created_at').notNull(),
  // The key-order value a keyed event got at its first publish (null: unkeyed, or published before the column): a
  // backfill gives its replayed deliveries this value, so each key's history runs in its original commit order.
  sequence: bigint('sequence', { mode: 'bigint' }),
});

/**
 * One row per (event, handler) from publish until its completion commits; `pending` or `dead`. An event published
 * without an id of the caller's, a small payload and no completion history has no events row (migration 0003): its
 * deliveries carry `event_type`, `payload` and `headers` themselves (null on the deliveries of an event with a row).
 */
export const relaybusDeliveries = relaybusSchema.table(
  'relaybus_deliveries',
  {
    id: bigint('id', { mode: 'bigint' }).primaryKey().generatedAlwaysAsIdentity(),
    eventId: text('event_id').notNull(),
    handler: text('handler').notNull(),
    lane: smallint('lane').notNull(),
    key: text('key'),
    sequence: bigint('sequence', { mode: 'bigint' }),
    status: text('status').notNull(),
    attempts: integer('attempts').notNull(),
    maxAttempts: integer('max_attempts').notNull(),
    claims: integer('claims').notNull(),
    availableAt: instant('available_at').notNull(),
    lastError: text('last_error'),
    createdAt: instant('created_at').notNull(),
    updatedAt: instant('updated_at').notNull(),
    eventType: text('event_type'),
    payload: jsonb('payload'),
    headers: jsonb('headers'),
    // The replay that created it (null: published): while a replay runs, its handlers' other keyed deliveries wait.
    replayId: bigint('replay_id', { mode: 'bigint' }),
  },
  (t) => [
    // No foreign key to events and no unique (event_id, handler) index (migration 0002): each cost a probe or an index
    // insert per delivery at publish. One delivery per (event, handler) is kept by `events.handlers`, read and extended
    // under the event row's lock; the purge locks an event before it re-checks that no delivery is left.
    // Unkeyed pending rows in due order: the claim takes them oldest first, capped per lane.
    index('relaybus_deliveries_unkeyed_due_idx')
      .on(t.lane, t.availableAt, t.id)
      .where(sql`key IS NULL AND status = 'pending'`),
    // Keyed pending rows by key and sequence: the claim walks it key by key (each key's first row is its head), so
    // blocked followers are never read, whatever their due time.
    index('relaybus_deliveries_lane_handler_key_sequence_idx')
      .on(t.lane, t.handler, t.key, t.sequence)
      .where(sql`key IS NOT NULL AND status = 'pending'`),
    // Keyed pending rows in due order: only "does this lane have due keyed work?" (acquire-lanes).
    index('relaybus_deliveries_keyed_due_idx')
      .on(t.lane, t.availableAt)
      .where(sql`key IS NOT NULL AND status = 'pending'`),
    // A running replay's pending keyed rows by key: while its handlers' live rows are held, the claim finds the
    // replayed heads here instead of walking every held key (migration 0006). Holds no published row.
    index('relaybus_deliveries_replayed_idx')
      .on(t.lane, t.handler, t.key, t.sequence)
      .where(sql`replay_id IS NOT NULL AND key IS NOT NULL AND status = 'pending'`),
    index('relaybus_deliveries_updated_at_id_idx').on(t.updatedAt, t.id).where(sql`status = 'dead'`),
    check('relaybus_deliveries_lane_check', sql`lane >= 0 AND lane < 256`),
    check('relaybus_deliveries_status_check', sql`status IN ('pending', 'dead', 'completed')`),
    check('relaybus_deliveries_attempts_check', sql`attempts >= 0 AND max_attempts >= 1`),
  ],
);

/**
 * 256 lane rows, the unit of leasing. No secondary index and fillfactor 50 (supplement), so every
 * update of a lane row is heap-only (HOT). `in_flight` lists the delivery ids the owner has claimed.
 */
export const relaybusLanes = relaybusSchema.table(
  'relaybus_lanes',
  {
    lane: smallint('lane').primaryKey(),
    epoch: bigint('epoch', { mode: 'bigint' }).notNull().default(sql`0`),
    leaseOwner: text('lease_owner'),
    leaseExpiresAt: instant('lease_expires_at'),
    inFlight: bigint('in_flight', { mode: 'bigint' }).array().notNull().default(sql`'{}'`),
  },
  () => [check('relaybus_lanes_lane_check', sql`lane >= 0 AND lane < 256`)],
);

/**
 * The order of keyed deliveries: a publish (or requeue) takes a transaction-scoped advisory lock per key, then a
 * value of this sequence for each of its keyed events. The lock is held until commit, so a later transaction of the
 * same key takes a larger value only after this one committed: per key, sequence order is commit order.
 */
export const relaybusKeyOrder = relaybusSchema.sequence('relaybus_key_order');

/**
 * Which handlers an event type fans out to, kept by the workers that run them (`bus.start()`, `relaybus setup
 * --subscriptions`): a publish reads them in its own statement, so a publisher needs the event definitions only.
 * `seen_at` is refreshed by the workers that run the handler; an old one means no live worker runs it.
 */
export const relaybusSubscriptions = relaybusSchema.table(
  'relaybus_subscriptions',
  {
    eventType: text('event_type').notNull(),
    handler: text('handler').notNull(),
    maxAttempts: integer('max_attempts').notNull(),
    retry: jsonb('retry'),
    active: boolean('active').notNull().default(true),
    createdAt: instant('created_at').notNull().default(sql`now()`),
    updatedAt: instant('updated_at').notNull().default(sql`now()`),
    seenAt: instant('seen_at'),
  },
  (t) => [
    primaryKey({ name: 'relaybus_subscriptions_pkey', columns: [t.eventType, t.handler] }),
    check('relaybus_subscriptions_max_attempts_check', sql`max_attempts >= 1`),
  ],
);

/**
 * Handlers an operator paused (`relaybus handlers pause`, `store.pauseHandler()`), one row each while paused: no worker
 * claims their deliveries, which keep being published and wait, in order, until the handler is resumed (the row is
 * deleted). Every claim statement reads this table, so a pause holds for every worker from its next claim on.
 */
export const relaybusPausedHandlers = relaybusSchema.table('relaybus_paused_handlers', {
  handler: text('handler').primaryKey(),
  pausedAt: instant('paused_at').notNull(),
  reason: text('reason'),
});

/**
 * Replays (`store.startReplay`, `relaybus replay`), kept as the audit record of who replayed what and when, with the
 * progress of a running one: `cursor` is the position of the last planned event taken, `planned` the last position
 * planned; `start_xmax` the xmax of the start's snapshot (the late look waits until every transaction running at start
 * has ended); `first_delivery_id` the id of its first delivery (where its deliveries begin in the id sequence).
 */
export const relaybusReplays = relaybusSchema.table(
  'relaybus_replays',
  {
    id: bigint('id', { mode: 'bigint' }).primaryKey().generatedAlwaysAsIdentity(),
    mode: text('mode').notNull(),
    handlers: text('handlers').array().notNull(),
    filter: jsonb('filter').notNull(),
    requestedBy: text('requested_by'),
    reason: text('reason'),
    state: text('state').notNull(),
    createdAt: instant('created_at').notNull(),
    updatedAt: instant('updated_at').notNull(),
    finishedAt: instant('finished_at'),
    total: bigint('total', { mode: 'bigint' }).notNull(),
    created: bigint('created', { mode: 'bigint' }).notNull(),
    skipped: bigint('skipped', { mode: 'bigint' }).notNull(),
    cursor: bigint('cursor', { mode: 'bigint' }).notNull(),
    planned: bigint('planned', { mode: 'bigint' }).notNull(),
    startXmax: bigint('start_xmax', { mode: 'bigint' }).notNull(),
    firstDeliveryId: bigint('first_delivery_id', { mode: 'bigint' }),
    // The first key-order value a publish after the start can get: live keyed rows from it on wait for the replay
    // (null: every live keyed row of its handlers waits; none was pending at the start). See
    // sql/fragments/runnable-handlers.sql.
    holdFrom: bigint('hold_from', { mode: 'bigint' }),
  },
  (t) => [
    // The running replays: every claim statement reads which handlers are held (sql/fragments/runnable-handlers.sql).
    index('relaybus_replays_running_idx').on(t.id).where(sql`state = 'running'`),
    check('relaybus_replays_mode_check', sql`mode IN ('backfill', 'redrive')`),
    check('relaybus_replays_state_check', sql`state IN ('running', 'finished', 'cancelled')`),
  ],
);

/**
 * A running replay's plan: one row per (event, handler) to create, at the event's position in the replay's order
 * (all of an event's items share it), with the delivery's sequence. A step takes (and deletes) the next positions.
 */
export const relaybusReplayItems = relaybusSchema.table(
  'relaybus_replay_items',
  {
    replayId: bigint('replay_id', { mode: 'bigint' }).notNull(),
    position: bigint('position', { mode: 'bigint' }).notNull(),
    handler: text('handler').notNull(),
    eventId: text('event_id').notNull(),
    sequence: bigint('sequence', { mode: 'bigint' }),
    maxAttempts: integer('max_attempts').notNull(),
  },
  (t) => [primaryKey({ name: 'relaybus_replay_items_pkey', columns: [t.replayId, t.position, t.handler] })],
);

/** Optional append-only history of completed deliveries (`completionHistory: true`). */
export const relaybusCompletedDeliveries = relaybusSchema.table(
  'relaybus_completed_deliveries',
  {
    deliveryId: bigint('delivery_id', { mode: 'bigint' }).notNull(),
    eventId: text('event_id').notNull(),
    eventType: text('event_type').notNull(),
    handler: text('handler').notNull(),
    lane: smallint('lane').notNull(),
    key: text('key'),
    sequence: bigint('sequence', { mode: 'bigint' }),
    attempts: integer('attempts').notNull(),
    maxAttempts: integer('max_attempts').notNull(),
    createdAt: instant('created_at').notNull(),
    completedAt: instant('completed_at').notNull(),
  },
  (t) => [
    primaryKey({ name: 'relaybus_completed_deliveries_pkey', columns: [t.deliveryId] }),
    index('relaybus_completed_deliveries_completed_at_idx').on(t.completedAt),
  ],
);

/** Which migrations `setup()` has applied to this schema. */
export const relaybusMigrations = relaybusSchema.table('relaybus_migrations', {
  name: text('name').primaryKey(),
  appliedAt: instant('applied_at').notNull().default(sql`now()`),
});
