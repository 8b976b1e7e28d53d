-- list-subscriptions: every subscription, by event type and handler, with the deliveries of that handler and type
--                     still pending (due, scheduled or in flight).
-- index: relaybus_subscriptions_pkey; a scan of the pending deliveries joined to their events (an admin view)
-- params: none
-- returns: event_type, handler, max_attempts, retry, created_at, updated_at, seen_at, pending
WITH pending AS (
  -- An event published inline has no events row: its deliveries carry its type.
  SELECT coalesce(d.event_type, e.type) AS event_type, d.handler, count(*) AS n
  FROM /*schema*/relaybus_deliveries d
  LEFT JOIN /*schema*/relaybus_events e ON e.id = d.event_id AND d.event_type IS NULL
  WHERE d.status = 'pending'
  GROUP BY 1, d.handler
)
SELECT s.event_type, s.handler, s.max_attempts, s.retry, s.created_at, s.updated_at, s.seen_at,
       coalesce(p.n, 0)::int AS pending
FROM /*schema*/relaybus_subscriptions s
LEFT JOIN pending p ON p.event_type = s.event_type AND p.handler = s.handler
WHERE s.active
ORDER BY s.event_type, s.handler
