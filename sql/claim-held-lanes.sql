-- claim-held-lanes: pick due deliveries from the lanes this owner holds and record them in flight; hand back held
--                   lanes that got nothing and run nothing. Delivery rows are read, never written.
-- index: relaybus_lanes (the owner's rows, locked FOR NO KEY UPDATE); relaybus_deliveries_lane_available_at_id_idx (ordered scan per lane, capped at its share);
--        relaybus_deliveries_lane_handler_key_sequence_idx (is an earlier delivery of the key still pending?);
--        relaybus_deliveries_pkey (pruning finished ids from in_flight); relaybus_events_pkey (payload)
-- params: $1 owner text, $2 handlers text[], $3 limit int, $4 lease_ms int, $5 now timestamptz (null = now())
-- returns: one row per claimed delivery with the lane epoch it was recorded under, oldest due first
WITH clock AS (
  SELECT coalesce($5::timestamptz, now()) AS now
),
held AS (
  -- Locked, so this statement reads the latest in_flight and a concurrent claim of the same owner waits; a
  -- transactional completion's FOR KEY SHARE does not conflict.
  SELECT l.lane, l.in_flight FROM /*schema*/relaybus_lanes l WHERE l.lease_owner = $1
  ORDER BY l.lane -- one lock order for every statement that locks several lanes: no deadlock
  FOR NO KEY UPDATE
),
seen AS (
  -- The same lane rows as of this statement's snapshot (no lock): a reschedule, bury or release that committed
  -- while this statement waited for the lock took its delivery out of the latest in_flight, but the delivery rows
  -- read below are the snapshot's (still due, old claims). An id either version lists is not picked now.
  SELECT s.lane, s.in_flight FROM /*schema*/relaybus_lanes s WHERE s.lane IN (SELECT lane FROM held)
),
picked AS (
  SELECT c.* FROM held h
  JOIN seen s ON s.lane = h.lane
  CROSS JOIN LATERAL (
    SELECT d.* FROM (
      -- Capped scan, each lane's share of the batch: a deep backlog of blocked followers of a key cannot make a
      -- claim read the whole lane, and many held lanes do not multiply the rows read.
      SELECT d.id, d.lane, d.event_id, d.handler, d.key, d.sequence, d.attempts, d.max_attempts, d.claims,
             d.available_at, d.created_at
      FROM /*schema*/relaybus_deliveries d
      WHERE d.lane = h.lane AND d.status = 'pending' AND d.available_at <= (SELECT now FROM clock)
        AND d.handler = ANY ($2::text[]) AND d.id <> ALL (h.in_flight) AND d.id <> ALL (s.in_flight)
      ORDER BY d.available_at, d.id
      LIMIT ($3::int / (SELECT count(*) FROM held)::int + 1) * 2 + 16
    ) d
    WHERE d.key IS NULL OR NOT EXISTS (
      SELECT 1 FROM /*schema*/relaybus_deliveries p
      WHERE p.lane = d.lane AND p.handler = d.handler AND p.key = d.key AND p.sequence < d.sequence
        AND p.status = 'pending')
    ORDER BY d.available_at, d.id
    LIMIT $3::int
  ) c
  ORDER BY c.available_at, c.id
  LIMIT $3::int
),
grouped AS (
  SELECT lane, array_agg(id ORDER BY id) AS ids FROM picked GROUP BY lane
),
recorded AS (
  UPDATE /*schema*/relaybus_lanes l
  SET in_flight = ARRAY(
        SELECT f FROM unnest(l.in_flight) AS f
        WHERE EXISTS (SELECT 1 FROM /*schema*/relaybus_deliveries d WHERE d.id = f)) || g.ids,
      lease_expires_at = (SELECT now FROM clock) + make_interval(secs => $4::int / 1000.0)
  FROM grouped g
  WHERE l.lane = g.lane AND l.lease_owner = $1
  RETURNING l.lane, l.epoch
),
handed_back AS (
  UPDATE /*schema*/relaybus_lanes l
  SET lease_owner = NULL, lease_expires_at = NULL, in_flight = '{}'
  FROM held h
  -- h.in_flight, not l.in_flight: h is the locked, latest row, while an anti-join on l would be re-checked against
  -- the row version of this statement's snapshot (EvalPlanQual keeps the first join result).
  WHERE l.lane = h.lane AND l.lease_owner = $1
    AND l.lane NOT IN (SELECT lane FROM grouped)
    AND NOT EXISTS (SELECT 1 FROM /*schema*/relaybus_deliveries d WHERE d.id = ANY (h.in_flight))
  RETURNING l.lane
)
SELECT p.id::text AS id, p.lane, r.epoch::text AS epoch, p.claims, p.event_id, e.type AS event_type, p.handler,
       p.key, p.sequence::text AS sequence, e.payload, e.headers, p.attempts, p.max_attempts, p.available_at,
       p.created_at
FROM picked p
JOIN recorded r ON r.lane = p.lane
JOIN /*schema*/relaybus_events e ON e.id = p.event_id
ORDER BY p.available_at, p.id
