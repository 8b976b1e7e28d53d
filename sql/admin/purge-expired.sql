-- purge-expired: retention. Deletes dead deliveries past the dead-letter retention, completion history and events
--                with no delivery left past the completed retention. An event whose last dead delivery is purged
--                here goes in the next run (one snapshot per statement).
-- index: relaybus_deliveries_updated_at_id_idx (dead); relaybus_completed_deliveries_completed_at_idx; none for
--        "does the event still have deliveries?" (a hash anti-join over the deliveries, once per run: publish pays
--        no index entry for it)
-- params: $1 completed retention ms bigint, $2 dead retention ms bigint, $3 now timestamptz (null = now())
-- returns: one row: events, dead_deliveries, history deleted
WITH clock AS (
  SELECT coalesce($3::timestamptz, now()) AS now
),
dead AS (
  DELETE FROM /*schema*/relaybus_deliveries d
  WHERE d.status = 'dead' AND d.updated_at < (SELECT now FROM clock) - make_interval(secs => $2::bigint / 1000.0)
  RETURNING d.id
),
history AS (
  DELETE FROM /*schema*/relaybus_completed_deliveries h
  WHERE h.completed_at < (SELECT now FROM clock) - make_interval(secs => $1::bigint / 1000.0)
  RETURNING h.delivery_id
),
events AS (
  -- No foreign key guards this: a publish of an existing id locks the event row and extends its handlers before it
  -- adds a delivery. Waiting on such a lock, the re-check sees the new handlers (this snapshot's differ): skipped.
  DELETE FROM /*schema*/relaybus_events e
  USING (
    SELECT c.id, c.handlers FROM /*schema*/relaybus_events c
    WHERE c.created_at < (SELECT now FROM clock) - make_interval(secs => $1::bigint / 1000.0)
      AND NOT EXISTS (SELECT 1 FROM /*schema*/relaybus_deliveries d WHERE d.event_id = c.id)
  ) gone
  WHERE e.id = gone.id AND e.handlers = gone.handlers
  RETURNING e.id
)
SELECT (SELECT count(*) FROM events)::int AS events, (SELECT count(*) FROM dead)::int AS dead_deliveries,
       (SELECT count(*) FROM history)::int AS history
