-- bury: a failed last attempt: +1 attempt, status dead (never claimed until requeue), error recorded, out of the
--       lane's in-flight list (fenced). Rare path.
-- index: relaybus_lanes_pkey (locked first, as in reschedule); relaybus_deliveries_pkey
-- params: $1 delivery id bigint, $2 lane smallint, $3 epoch bigint, $4 claims int, $5 error text,
--         $6 now timestamptz (null = now())
-- returns: the id when buried (no row = lease lost)
WITH fence AS (
  SELECT l.lane FROM /*schema*/relaybus_lanes l
  WHERE l.lane = $2::smallint AND l.epoch = $3::bigint AND $1::bigint = ANY (l.in_flight)
  FOR NO KEY UPDATE
),
updated AS (
  UPDATE /*schema*/relaybus_deliveries d
  SET attempts = d.attempts + 1, claims = d.claims + 1, status = 'dead', last_error = $5::text,
      updated_at = coalesce($6::timestamptz, now())
  WHERE d.id = $1::bigint AND d.lane = $2::smallint AND d.claims = $4::int AND d.status = 'pending'
    AND EXISTS (SELECT 1 FROM fence)
  RETURNING d.id
),
unlisted AS (
  UPDATE /*schema*/relaybus_lanes l
  SET in_flight = array_remove(l.in_flight, $1::bigint)
  WHERE l.lane = $2::smallint AND EXISTS (SELECT 1 FROM updated)
  RETURNING l.lane
)
SELECT id::text AS id FROM updated
