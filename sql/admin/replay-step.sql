-- replay-step: create the deliveries of a running replay's next planned events, positions $2 + 1 .. $2 + $3 (all the
--              items of each; taken items are deleted), with its progress, in one statement: after a crash the next
--              step goes on from the last committed one, and no item is created twice. The taken events are locked
--              (FOR UPDATE, in id order as publish locks them) before their handlers are read, so a concurrent publish
--              of the same id and a step never both add a handler, and the purge (which locks first) never removes an
--              event gaining one. An item is skipped when its event is gone, or (backfill) its handler is in the
--              event's handlers by now, or (redrive) it is not or has a delivery of the event now. A backfilled
--              delivery appends its handler to the event's handlers (as publish's inbox dedup does). Each delivery
--              gets its item's sequence and the replay's id; the claims run each key's in sequence order.
-- index: relaybus_replay_items_pkey (the range of positions); relaybus_events_pkey (lock and handlers, per event);
--        redrive: relaybus_deliveries_lane_handler_key_sequence_idx and relaybus_deliveries_unkeyed_due_idx (a pending
--        delivery of the event, by key or lane), relaybus_deliveries_updated_at_id_idx (a dead one: the dead rows, which
--        retention bounds); relaybus_replays_pkey
-- params: $1 replay id bigint, $2 cursor bigint (the position of the last item taken), $3 events to take int,
--         $4 mode text, $5 now timestamptz (null = now()), $6 NOTIFY channel text (null = no NOTIFY)
-- returns: one row: created (deliveries created), taken (items taken)
WITH taken AS (
  DELETE FROM /*schema*/relaybus_replay_items i
  WHERE i.replay_id = $1::bigint AND i.position > $2::bigint AND i.position <= $2::bigint + $3::int
  RETURNING i.position, i.handler, i.event_id, i.sequence, i.max_attempts
),
taken_events AS (
  -- Each taken item with its event, the events locked in id order (as publish locks them). Joined here, from the
  -- items to the events' primary key, once per item: the items are never analyzed (a replay plans them and takes them
  -- in the same minutes), and a join of two CTEs planned for one row each became a pass over the events for every item.
  SELECT t.position, t.handler, t.event_id, t.sequence, t.max_attempts, e.key, e.handlers
  FROM taken t JOIN /*schema*/relaybus_events e ON e.id = t.event_id
  ORDER BY e.id
  FOR UPDATE OF e
),
pairs AS (
  SELECT t.position, t.handler, t.event_id, t.sequence, t.max_attempts, t.key,
         /*schema*/relaybus_lane(coalesce(t.key, t.event_id)) AS lane
  FROM taken_events t
  WHERE CASE WHEN $4::text = 'backfill' THEN t.handler <> ALL (t.handlers)
        ELSE t.handler = ANY (t.handlers)
          -- No delivery of the event now, looked up where the claims' partial indexes keep it: pending keyed by its
          -- key, pending unkeyed in its lane, dead ones among the dead.
          AND NOT EXISTS (
            SELECT 1 FROM /*schema*/relaybus_deliveries d
            WHERE d.lane = /*schema*/relaybus_lane(t.key) AND d.handler = t.handler AND d.key = t.key
              AND d.key IS NOT NULL AND d.status = 'pending' AND d.event_id = t.event_id)
          AND NOT EXISTS (
            SELECT 1 FROM /*schema*/relaybus_deliveries d
            WHERE d.lane = /*schema*/relaybus_lane(t.event_id) AND t.key IS NULL AND d.key IS NULL
              AND d.status = 'pending' AND d.handler = t.handler AND d.event_id = t.event_id)
          AND NOT EXISTS (
            SELECT 1 FROM /*schema*/relaybus_deliveries d
            WHERE d.status = 'dead' AND d.handler = t.handler AND d.event_id = t.event_id)
        END
),
extended AS (
  -- The added handlers grouped once per event (not a scan of pairs for each event).
  UPDATE /*schema*/relaybus_events e SET handlers = e.handlers || a.added
  FROM (SELECT p.event_id, array_agg(p.handler ORDER BY p.handler) AS added FROM pairs p GROUP BY p.event_id) a
  WHERE $4::text = 'backfill' AND e.id = a.event_id
),
delivered AS (
  INSERT INTO /*schema*/relaybus_deliveries
    (event_id, handler, lane, key, sequence, status, attempts, max_attempts, claims, available_at, created_at, updated_at,
     replay_id)
  SELECT p.event_id, p.handler, p.lane, p.key, p.sequence, 'pending', 0, p.max_attempts, 0,
         coalesce($5::timestamptz, now()), coalesce($5::timestamptz, now()), coalesce($5::timestamptz, now()), $1::bigint
  FROM pairs p
  ORDER BY p.position, p.handler
  RETURNING id, lane
),
progress AS (
  UPDATE /*schema*/relaybus_replays r
  SET cursor = coalesce((SELECT max(t.position) FROM taken t), r.cursor),
      created = r.created + (SELECT count(*) FROM delivered),
      skipped = r.skipped + (SELECT count(*) FROM taken) - (SELECT count(*) FROM delivered),
      updated_at = coalesce($5::timestamptz, now()),
      first_delivery_id = coalesce(r.first_delivery_id, (SELECT min(d.id) FROM delivered d))
  WHERE r.id = $1::bigint
),
notified AS (
  -- Wakes the dispatchers that LISTEN at commit, naming the lanes written (as a publish does: `3,17,200`, at most the
  -- 256 lanes), so their next claims take those lanes rather than look at every free lane, for every step.
  SELECT pg_notify($6::text, w.lanes)
  FROM (SELECT string_agg(DISTINCT d.lane::text, ',') AS lanes FROM delivered d) w
  WHERE $6::text IS NOT NULL AND w.lanes IS NOT NULL
)
SELECT (SELECT count(*) FROM delivered)::int AS created, (SELECT count(*) FROM taken)::int AS taken
WHERE (SELECT count(*) FROM notified) >= 0
