-- reschedule: a failed attempt: +1 attempt, claimable again at available_at, error recorded, out of the lane's
--             in-flight list (fenced). Rare path: updates indexed columns, so not HOT.
-- index: relaybus_lanes_pkey (locked first, FOR NO KEY UPDATE, so the lock order matches a takeover's);
--        relaybus_deliveries_pkey
-- params: $1 delivery id bigint, $2 lane smallint, $3 epoch bigint, $4 claims int, $5 available_at timestamptz,
--         $6 error text, $7 now timestamptz (null = now())
-- returns: the id, lane, handler and key when updated (no row = lease lost); the store probes a keyed one's key
--          when it is due again
WITH fence AS (
  SELECT l.lane FROM /*schema*/relaybus_lanes l
  WHERE l.lane = $2::smallint AND l.epoch = $3::bigint AND $1::bigint = ANY (l.in_flight)
  FOR NO KEY UPDATE
),
updated AS (
  UPDATE /*schema*/relaybus_deliveries d
  SET attempts = d.attempts + 1, claims = d.claims + 1, available_at = $5::timestamptz, last_error = $6::text,
      updated_at = coalesce($7::timestamptz, now())
  WHERE d.id = $1::bigint AND d.lane = $2::smallint AND d.claims = $4::int AND d.status = 'pending'
    AND EXISTS (SELECT 1 FROM fence)
  RETURNING d.id, d.lane, d.handler, d.key
),
unlisted AS (
  UPDATE /*schema*/relaybus_lanes l
  SET in_flight = array_remove(l.in_flight, $1::bigint)
  WHERE l.lane = $2::smallint AND EXISTS (SELECT 1 FROM updated)
  RETURNING l.lane
)
SELECT id::text AS id, lane, handler, key FROM updated
