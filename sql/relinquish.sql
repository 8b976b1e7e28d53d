-- relinquish: hand back every lane of this owner that runs nothing, so other workers take it at once.
-- index: relaybus_lanes (256 rows, read whole); relaybus_deliveries_pkey (is anything in flight still there?)
-- params: $1 owner text
-- returns: lane of every lane handed back
UPDATE /*schema*/relaybus_lanes l
SET lease_owner = NULL, lease_expires_at = NULL, in_flight = '{}'
WHERE l.lease_owner = $1
  AND NOT EXISTS (SELECT 1 FROM /*schema*/relaybus_deliveries d WHERE d.id = ANY (l.in_flight))
RETURNING l.lane
