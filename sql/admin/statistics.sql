-- statistics: per-handler counts of pending (not in flight), due, scheduled, in flight, dead and completed
--             (history) deliveries, the oldest due instant, and the number of leased lanes.
-- index: none: a scan of deliveries joined to the 256 lane rows (an admin path)
-- params: $1 now timestamptz (null = now())
-- returns: one row per handler, plus one row with handler null carrying lanes_leased
WITH clock AS (
  SELECT coalesce($1::timestamptz, now()) AS now
),
live AS (
  SELECT d.handler, d.status, d.available_at, (d.status = 'pending' AND d.id = ANY (l.in_flight)) AS in_flight
  FROM /*schema*/relaybus_deliveries d JOIN /*schema*/relaybus_lanes l ON l.lane = d.lane
),
per_handler AS (
  SELECT handler,
         count(*) FILTER (WHERE status = 'pending' AND NOT in_flight)::int AS pending,
         count(*) FILTER (WHERE status = 'pending' AND NOT in_flight AND available_at <= (SELECT now FROM clock))::int AS due,
         count(*) FILTER (WHERE status = 'pending' AND NOT in_flight AND available_at > (SELECT now FROM clock))::int AS scheduled,
         count(*) FILTER (WHERE in_flight)::int AS in_flight,
         count(*) FILTER (WHERE status = 'dead')::int AS dead,
         min(available_at) FILTER (WHERE status = 'pending' AND NOT in_flight AND available_at <= (SELECT now FROM clock)) AS oldest_due_at
  FROM live GROUP BY handler
),
history AS (
  SELECT handler, count(*)::int AS completed FROM /*schema*/relaybus_completed_deliveries GROUP BY handler
)
SELECT coalesce(p.handler, h.handler) AS handler, coalesce(p.pending, 0) AS pending, coalesce(p.due, 0) AS due,
       coalesce(p.scheduled, 0) AS scheduled, coalesce(p.in_flight, 0) AS in_flight, coalesce(p.dead, 0) AS dead,
       coalesce(h.completed, 0) AS completed, p.oldest_due_at, NULL::int AS lanes_leased
FROM per_handler p FULL JOIN history h ON h.handler = p.handler
UNION ALL
SELECT NULL, 0, 0, 0, 0, 0, 0, NULL,
       (SELECT count(*)::int FROM /*schema*/relaybus_lanes
        WHERE lease_owner IS NOT NULL AND lease_expires_at > (SELECT now FROM clock))
