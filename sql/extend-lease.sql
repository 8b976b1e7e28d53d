-- extend-lease: renew the lease of lanes the owner still holds at the given epochs.
-- index: relaybus_lanes_pkey (HOT update: no indexed column changes)
-- params: $1 owner text, $2 lanes smallint[], $3 epochs bigint[], $4 lease_ms int, $5 now timestamptz (null = now())
-- returns: lane of every renewed lane (absent lanes = lost)
UPDATE /*schema*/relaybus_lanes l
SET lease_expires_at = coalesce($5::timestamptz, now()) + make_interval(secs => $4::int / 1000.0)
FROM unnest($2::smallint[], $3::bigint[]) AS h(lane, epoch)
WHERE l.lane = h.lane AND l.epoch = h.epoch AND l.lease_owner = $1
RETURNING l.lane
