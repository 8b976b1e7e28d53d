-- forget-in-flight: after a claim of this owner failed, take out of the in-flight lists of its lanes every delivery the
--                   worker does not hold (running, waiting to start, its outcome being written): that claim may have
--                   committed before its answer was lost, and what it recorded would otherwise stay in flight, skipped
--                   by every claim, as long as the owner keeps the lane. They are claimable again; no attempt is
--                   charged and no delivery row is written.
--                   Locks the owner's lanes and the free ones the failed claim named ($3): a claim cut off on the
--                   client may still be running, and this waits for it. Rows locked after waiting are their latest
--                   version (the owner read from `held`, not from this statement's snapshot), so a lane that claim
--                   took meanwhile is included.
-- index: relaybus_lanes (the owner's rows and the named ones, locked FOR NO KEY UPDATE in lane order, as every statement
--        that locks several lanes); relaybus_deliveries_pkey (which of the dropped ids are still pending)
-- params: $1 owner text, $2 delivery ids the worker holds bigint[], $3 lanes the failed claim named smallint[]
-- returns: lane and forgotten (how many still-pending deliveries were dropped from its list), for every lane changed
WITH held AS (
  SELECT l.lane, l.lease_owner, l.in_flight FROM /*schema*/relaybus_lanes l
  WHERE l.lease_owner = $1 OR l.lane = ANY ($3::smallint[])
  ORDER BY l.lane
  FOR NO KEY UPDATE
),
kept AS (
  SELECT h.lane, h.in_flight, ARRAY(SELECT f FROM unnest(h.in_flight) AS f WHERE f = ANY ($2::bigint[])) AS ids
  FROM held h
  WHERE h.lease_owner = $1
)
UPDATE /*schema*/relaybus_lanes l
SET in_flight = k.ids
FROM kept k
WHERE l.lane = k.lane AND cardinality(k.ids) < cardinality(k.in_flight)
RETURNING l.lane,
  (SELECT count(*) FROM /*schema*/relaybus_deliveries d
   WHERE d.id = ANY (k.in_flight) AND d.id <> ALL (k.ids) AND d.status = 'pending')::int AS forgotten
