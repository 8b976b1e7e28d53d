-- replay-in-flight: how many keyed deliveries of a replay's handlers that it did not create are in flight (listed in
--                   a lane's in_flight): claimed before the replay started (the hold keeps the others from being
--                   claimed); until none is, its steps create nothing, or a replayed head could run beside an older
--                   delivery of its key.
-- index: relaybus_lanes (the 256 rows); relaybus_deliveries_pkey (one probe per id in flight)
-- params: $1 replay id bigint, $2 its handlers text[]
-- returns: one row: in_flight
SELECT count(*)::int AS in_flight
FROM /*schema*/relaybus_lanes l
CROSS JOIN LATERAL unnest(l.in_flight) AS f(id)
JOIN /*schema*/relaybus_deliveries d ON d.id = f.id
WHERE d.key IS NOT NULL AND d.handler = ANY ($2::text[]) AND d.replay_id IS DISTINCT FROM $1::bigint
