-- acquire-lanes: take free or expired lanes that have due work for these handlers; taking over an expired lease
--                charges one attempt to every delivery its holder still had in flight (dead at max_attempts).
-- index: relaybus_lanes_pkey (FOR UPDATE SKIP LOCKED: two claimers never take the same lane);
--        relaybus_deliveries_lane_available_at_id_idx (due work?); relaybus_deliveries_pkey (charging)
-- params: $1 owner text, $2 handlers text[], $3 lanes to take int, $4 start offset int (spreads claimers),
--         $5 lease_ms int, $6 now timestamptz (null = now())
-- returns: one row: lanes taken, deliveries charged
WITH clock AS (
  SELECT coalesce($6::timestamptz, now()) AS now
),
free AS (
  SELECT l.lane, l.lease_owner, l.in_flight
  FROM /*schema*/relaybus_lanes l
  WHERE (l.lease_owner IS NULL OR l.lease_expires_at <= (SELECT now FROM clock))
    AND l.lease_owner IS DISTINCT FROM $1
    AND EXISTS (
      SELECT 1 FROM /*schema*/relaybus_deliveries d
      WHERE d.lane = l.lane AND d.status = 'pending' AND d.available_at <= (SELECT now FROM clock)
        AND d.handler = ANY ($2::text[]))
  ORDER BY (l.lane + $4::int) % 256
  LIMIT $3::int
  FOR UPDATE OF l SKIP LOCKED
),
charged AS (
  UPDATE /*schema*/relaybus_deliveries d
  SET attempts = d.attempts + 1,
      claims = d.claims + 1,
      status = CASE WHEN d.attempts + 1 >= d.max_attempts THEN 'dead' ELSE 'pending' END,
      last_error = 'lease expired: lane ' || d.lane || ' was taken over from ' || f.lease_owner
                   || ' while this delivery was in flight (worker crashed or stalled)',
      updated_at = (SELECT now FROM clock)
  FROM free f
  WHERE f.lease_owner IS NOT NULL AND d.id = ANY (f.in_flight) AND d.status = 'pending'
  RETURNING d.id
),
taken AS (
  UPDATE /*schema*/relaybus_lanes l
  SET epoch = l.epoch + 1, lease_owner = $1, in_flight = '{}',
      lease_expires_at = (SELECT now FROM clock) + make_interval(secs => $5::int / 1000.0)
  FROM free f
  WHERE l.lane = f.lane
  RETURNING l.lane
)
SELECT (SELECT count(*) FROM taken)::int AS lanes, (SELECT count(*) FROM charged)::int AS charged
