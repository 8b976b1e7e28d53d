-- list-lanes: the lanes a worker holds (expired leases included), for operators (the admin page); in flight counts
--             only deliveries that still exist and are pending (a completed id lingers in in_flight until the next
--             claim prunes it).
-- index: relaybus_lanes (256 rows, scanned); relaybus_deliveries_pkey (one probe per in-flight id)
-- params: none
-- returns: lane, owner, epoch, lease_expires_at, in_flight, by lane
SELECT l.lane, l.lease_owner AS owner, l.epoch::text AS epoch, l.lease_expires_at,
       (SELECT count(*) FROM /*schema*/relaybus_deliveries d
        WHERE d.id = ANY (l.in_flight) AND d.status = 'pending')::int AS in_flight
FROM /*schema*/relaybus_lanes l
WHERE l.lease_owner IS NOT NULL
ORDER BY l.lane
