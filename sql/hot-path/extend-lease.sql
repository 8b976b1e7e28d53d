-- extend-lease: renew the lease of lanes the owner still holds at the given epochs.
-- index: relaybus_lanes_pkey (HOT update: no indexed column changes). The rows are locked first in lane order, the
--        order every statement that locks several lanes uses (claim-held-lanes, release, relinquish): updating them
--        in the caller's order deadlocked with a concurrent claim of the same owner.
-- params: $1 owner text, $2 lanes smallint[], $3 epochs bigint[], $4 lease_ms int, $5 now timestamptz (null = now())
-- returns: lane of every renewed lane (absent lanes = lost)
-- commit: asynchronous (synchronous_commit off for this statement's own transaction): a crash of the server may lose
--         it, which only means a redelivery (at-least-once), never a lost delivery; see docs/guide/guarantees.md.
WITH locked AS (
  SELECT l.lane FROM /*schema*/relaybus_lanes l
  WHERE l.lane = ANY ($2::smallint[]) AND l.lease_owner = $1
    AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
  ORDER BY l.lane
  FOR NO KEY UPDATE
)
UPDATE /*schema*/relaybus_lanes l
SET lease_expires_at = coalesce($5::timestamptz, now()) + make_interval(secs => $4::int / 1000.0)
FROM unnest($2::smallint[], $3::bigint[]) AS h(lane, epoch)
WHERE l.lane = h.lane AND l.epoch = h.epoch AND l.lease_owner = $1 AND l.lane IN (SELECT lane FROM locked)
RETURNING l.lane
