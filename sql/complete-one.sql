-- complete-one: delete one delivery inside the handler's transaction, fenced by a FOR KEY SHARE lock on its lane
--               row, which a takeover (FOR UPDATE) cannot pass until this transaction ends.
-- index: relaybus_lanes_pkey; relaybus_deliveries_pkey
-- params: $1 delivery id bigint, $2 lane smallint, $3 epoch bigint, $4 claims int
-- returns: the id when deleted (no row = lease lost)
WITH fence AS (
  SELECT l.lane FROM /*schema*/relaybus_lanes l
  WHERE l.lane = $2::smallint AND l.epoch = $3::bigint AND $1::bigint = ANY (l.in_flight)
  FOR KEY SHARE
)
DELETE FROM /*schema*/relaybus_deliveries d
WHERE d.id = $1::bigint AND d.lane = $2::smallint AND d.claims = $4::int AND d.status = 'pending'
  AND EXISTS (SELECT 1 FROM fence)
RETURNING d.id::text AS id
