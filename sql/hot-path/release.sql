-- release: give claimed deliveries back without charging an attempt (graceful shutdown); fenced.
-- index: relaybus_lanes_pkey (locked first, in lane order); relaybus_deliveries_pkey
-- params: $1 delivery ids bigint[], $2 lanes smallint[], $3 epochs bigint[], $4 claims int[], $5 now timestamptz (null = now())
-- returns: id of every released delivery (absent ids = lease lost)
WITH t AS (
  SELECT * FROM unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::int[]) AS t(id, lane, epoch, claims)
),
fence AS (
  SELECT l.lane, l.epoch, l.in_flight FROM /*schema*/relaybus_lanes l
  WHERE l.lane IN (SELECT lane FROM t)
  ORDER BY l.lane
  FOR NO KEY UPDATE
),
updated AS (
  UPDATE /*schema*/relaybus_deliveries d
  SET claims = d.claims + 1, updated_at = coalesce($5::timestamptz, now())
  FROM t JOIN fence f ON f.lane = t.lane AND f.epoch = t.epoch AND t.id = ANY (f.in_flight)
  WHERE d.id = t.id AND d.lane = t.lane AND d.claims = t.claims AND d.status = 'pending'
  RETURNING d.id, d.lane
),
unlisted AS (
  UPDATE /*schema*/relaybus_lanes l
  SET in_flight = ARRAY(SELECT f FROM unnest(l.in_flight) AS f WHERE f NOT IN (SELECT id FROM updated))
  WHERE l.lane IN (SELECT lane FROM updated)
  RETURNING l.lane
)
SELECT id::text AS id FROM updated
