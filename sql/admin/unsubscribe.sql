-- unsubscribe: remove a handler's subscriptions (of one event type, or all), never dropping a delivery silently:
--              its pending deliveries (of those types) are buried with $3 as their error, or, without $3, nothing
--              changes while any is pending. Nothing changes either while a worker runs one (in flight).
-- index: relaybus_subscriptions_pkey; a scan of the handler's pending deliveries joined to their events
-- params: $1 handler text, $2 event type text (null = every type), $3 bury reason text (null = refuse while pending),
--         $4 now timestamptz (null = now())
-- returns: one row: pending, in_flight, removed, buried
WITH pending AS (
  SELECT d.id, EXISTS (SELECT 1 FROM /*schema*/relaybus_lanes l WHERE d.id = ANY (l.in_flight)) AS in_flight
  FROM /*schema*/relaybus_deliveries d
  -- An event published inline has no events row: its deliveries carry its type.
  LEFT JOIN /*schema*/relaybus_events e ON e.id = d.event_id AND d.event_type IS NULL
  WHERE d.handler = $1::text AND d.status = 'pending' AND ($2::text IS NULL OR coalesce(d.event_type, e.type) = $2::text)
  ORDER BY d.id
  FOR UPDATE OF d
),
allowed AS (
  SELECT NOT EXISTS (SELECT 1 FROM pending WHERE in_flight)
     AND ($3::text IS NOT NULL OR NOT EXISTS (SELECT 1 FROM pending)) AS ok
),
buried AS (
  UPDATE /*schema*/relaybus_deliveries d
  SET status = 'dead', last_error = $3::text, claims = d.claims + 1, updated_at = coalesce($4::timestamptz, now())
  FROM pending p
  WHERE d.id = p.id AND (SELECT ok FROM allowed)
  RETURNING d.id
),
removed AS (
  DELETE FROM /*schema*/relaybus_subscriptions s
  WHERE s.handler = $1::text AND ($2::text IS NULL OR s.event_type = $2::text) AND (SELECT ok FROM allowed)
  RETURNING 1
)
SELECT (SELECT count(*) FROM pending)::int AS pending, (SELECT count(*) FROM pending WHERE in_flight)::int AS in_flight,
       (SELECT count(*) FROM removed)::int AS removed, (SELECT count(*) FROM buried)::int AS buried
