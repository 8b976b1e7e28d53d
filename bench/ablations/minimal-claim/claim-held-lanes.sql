-- claim-held-lanes (ablation, for bench/claim-compare.ts --text): what a keyed drain's claim cannot do without, and
--                   nothing else. The fenced completion of $9-$12 (as sql/hot-path/claim-held-lanes.sql), a walk over
--                   each held lane's keys from its first (no cursors, no wrap-around) until the lane's share of due
--                   heads not in flight is found, the oldest due $3 of those heads with up to $19 followers each, the
--                   in-flight record, and the claimed rows (sql/fragments/claimed-rows.sql, or bench/ablations/ids-only's).
--                   Left out: the replay hold and paused handlers, retry probes, named lanes, the completed keys'
--                   successors, one row per head, hand-back, walk ends and peer lanes. It takes the shipped claim's
--                   parameters (those it does not use are read in `params`, never evaluated) and returns its
--                   claimed and completed_ids. Not a claim to ship: it measures the design's floor.
WITH RECURSIVE params AS (
  SELECT $2::text[] AS a, $6::smallint[] AS b, $7::text[] AS c, $8::text[] AS d, $13::boolean AS e, $14::smallint[] AS f,
         $15::text[] AS g, $16::text[] AS h, $17::smallint[] AS i, $18::int AS j, $20::text[] AS k, $21::int AS l
),
held AS (
  SELECT l.lane, l.epoch, l.in_flight FROM /*schema*/relaybus_lanes l WHERE l.lease_owner = $1
  ORDER BY l.lane FOR NO KEY UPDATE
),
deleted AS (
  DELETE FROM /*schema*/relaybus_deliveries d
  USING unnest($9::bigint[], $10::smallint[], $11::bigint[], $12::int[]) AS t(id, lane, epoch, claims)
  WHERE d.id = t.id AND d.lane = t.lane AND d.claims = t.claims AND d.status = 'pending'
    AND NOT (t.id NOT IN (SELECT unnest(h.in_flight) FROM held h))
    AND NOT ((t.lane, t.epoch) NOT IN (SELECT h.lane, h.epoch FROM held h))
  RETURNING d.id, d.lane
),
busy AS (SELECT unnest(h.in_flight) AS id FROM held h),
share AS (
  SELECT ((greatest($3::int, 0) / greatest(count(*), 1)::int + 1) * 2)::int AS rows FROM held
),
walk AS (
  SELECT h.lane, n.*, 1 AS step,
         (n.available_at <= coalesce($5::timestamptz, now()) AND n.id NOT IN (SELECT id FROM busy))::int AS found
  FROM held h
  CROSS JOIN LATERAL (
    SELECT d.id, d.handler, d.key, d.available_at, d.event_id, d.sequence, d.attempts, d.max_attempts, d.claims, d.created_at, d.event_type, d.payload, d.headers
    FROM /*schema*/relaybus_deliveries d
    WHERE d.lane = h.lane AND d.key IS NOT NULL AND d.status = 'pending'
    ORDER BY d.handler, d.key, d.sequence LIMIT 1
  ) n
  UNION ALL
  SELECT w.lane, n.*, w.step + 1,
         w.found + (n.available_at <= coalesce($5::timestamptz, now()) AND n.id NOT IN (SELECT id FROM busy))::int
  FROM walk w
  CROSS JOIN LATERAL (
    SELECT d.id, d.handler, d.key, d.available_at, d.event_id, d.sequence, d.attempts, d.max_attempts, d.claims, d.created_at, d.event_type, d.payload, d.headers
    FROM /*schema*/relaybus_deliveries d
    WHERE d.lane = w.lane AND d.key IS NOT NULL AND d.status = 'pending' AND (d.handler, d.key) > (w.handler, w.key)
    ORDER BY d.handler, d.key, d.sequence LIMIT 1
  ) n
  WHERE w.found < (SELECT rows FROM share)
),
heads AS (
  SELECT w.id, w.lane, w.event_id, w.handler, w.key, w.sequence, w.attempts, w.max_attempts, w.claims,
         w.available_at, w.created_at, w.event_type, w.payload, w.headers
  FROM walk w
  WHERE w.available_at <= coalesce($5::timestamptz, now()) AND w.id NOT IN (SELECT id FROM busy)
  ORDER BY w.available_at, w.id
  LIMIT $3::int
),
followers AS (
  SELECT r.id, r.lane, r.event_id, r.handler, r.key, r.sequence, r.attempts, r.max_attempts, r.claims,
         r.available_at, r.created_at, r.event_type, r.payload, r.headers, r.after
  FROM heads h
  CROSS JOIN LATERAL (
    SELECT x.*, bool_and(x.ok) OVER (ORDER BY x.sequence) AS run, lag(x.id, 1, h.id) OVER (ORDER BY x.sequence) AS after
    FROM (
      SELECT d.id, d.lane, d.event_id, d.handler, d.key, d.sequence, d.attempts, d.max_attempts, d.claims,
             d.available_at, d.created_at, d.event_type, d.payload, d.headers,
             d.available_at <= coalesce($5::timestamptz, now()) AND d.id NOT IN (SELECT id FROM busy) AS ok
      FROM /*schema*/relaybus_deliveries d
      WHERE d.lane = h.lane AND d.handler = h.handler AND d.key = h.key AND d.sequence > h.sequence
        AND d.key IS NOT NULL AND d.status = 'pending'
      ORDER BY d.handler, d.key, d.sequence
      LIMIT $19::int
    ) x
  ) r
  WHERE r.run
),
picked AS (
  SELECT h.*, NULL::bigint AS after FROM heads h
  UNION ALL
  SELECT * FROM followers
),
grouped AS (
  SELECT lane, array_agg(id ORDER BY id) AS ids FROM picked GROUP BY lane
),
recorded AS (
  UPDATE /*schema*/relaybus_lanes l
  SET in_flight = ARRAY(
        SELECT f FROM unnest(l.in_flight) AS f
        WHERE f NOT IN (SELECT id FROM deleted)
          AND EXISTS (SELECT 1 FROM /*schema*/relaybus_deliveries d WHERE d.id = f)) || g.ids,
      lease_expires_at = coalesce($5::timestamptz, now()) + make_interval(secs => $4::int / 1000.0)
  FROM grouped g
  WHERE l.lane = g.lane AND l.lease_owner = $1
  RETURNING l.lane, l.epoch
),
summary AS MATERIALIZED (
  SELECT (SELECT count(*) FROM deleted) AS completed, (SELECT count(*) FROM recorded) AS lanes
)
SELECT /*include claimed-rows*/ AS claimed,
       CASE WHEN k.completed = cardinality($9::bigint[]) THEN NULL ELSE ARRAY(SELECT c.id::text FROM deleted c) END
         AS completed_ids
FROM summary k
