-- relinquish: hand back every lane of this owner that runs nothing, so other workers take it at once.
-- index: relaybus_lanes (256 rows; the owner's rows locked FOR NO KEY UPDATE, so the check below sees their latest
--        in_flight); relaybus_deliveries_pkey (is anything in flight still there?)
-- params: $1 owner text
-- returns: lane of every lane handed back
WITH held AS (
  SELECT l.lane, l.in_flight FROM /*schema*/relaybus_lanes l WHERE l.lease_owner = $1
  ORDER BY l.lane -- one lock order for every statement that locks several lanes: no deadlock
  FOR NO KEY UPDATE
)
UPDATE /*schema*/relaybus_lanes l
SET lease_owner = NULL, lease_expires_at = NULL, in_flight = '{}'
FROM held h
WHERE l.lane = h.lane AND l.lease_owner = $1
  AND NOT EXISTS (SELECT 1 FROM /*schema*/relaybus_deliveries d WHERE d.id = ANY (h.in_flight))
RETURNING l.lane
