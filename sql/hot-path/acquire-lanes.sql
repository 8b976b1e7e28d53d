-- acquire-lanes: take free or expired lanes that have due work for these handlers; taking over an expired lease
--                charges one attempt to every delivery its holder still had in flight (dead at max_attempts).
-- index: relaybus_lanes_pkey (one probe per lane tried, FOR UPDATE SKIP LOCKED: two claimers never take the same lane);
--        relaybus_deliveries_unkeyed_due_idx and relaybus_deliveries_keyed_due_idx (due work?; while a replay runs,
--        relaybus_deliveries_lane_handler_key_sequence_idx and relaybus_deliveries_replayed_idx); relaybus_deliveries_pkey
--        (charging); relaybus_paused_handlers (read once)
-- params: $1 owner text, $2 handlers text[] (the paused ones among them are left out), $3 lanes to take int, $4 start
--         offset int (spreads claimers), $5 lease_ms int, $6 now timestamptz (null = now()), $7 preferred lanes
--         smallint[] (tried first: the lanes a publish just named in its NOTIFY, the lanes of retried heads due again)
-- returns: one row: lanes taken, deliveries charged
-- plan: the parameters are read through a materialized CTE, so no plan depends on their values and the prepared
--       statement settles on its generic plan (with them inline Postgres re-planned it on every call).
-- commit: asynchronous (synchronous_commit off for this statement's own transaction): a crash of the server may lose
--         it, which only means a redelivery (at-least-once), never a lost delivery; see docs/guide/guarantees.md.
WITH /*include runnable-handlers*/,
clock AS MATERIALIZED (
  SELECT coalesce($6::timestamptz, now()) AS now, set_config('synchronous_commit', 'off', true) AS async_commit,
         $1::text AS owner, $3::int AS take,
         -- A lane whose only due work is a paused handler's, or held by a replay, is not taken.
         (SELECT handlers FROM runnable) AS handlers, (SELECT held FROM runnable) AS held,
         ARRAY(SELECT h FROM unnest((SELECT handlers FROM runnable)) AS h
               WHERE h <> ALL ((SELECT held FROM runnable)::text[])) AS free,
         $4::int AS start, $7::smallint[] AS prefer
),
free AS (
  -- Lanes are tried one at a time, the preferred ones first, then from the start offset (a lateral probe per lane, in
  -- order), so the search stops once enough lanes are taken instead of judging all 256 before a sort.
  SELECT f.lane, f.lease_owner, f.in_flight
  FROM (
    SELECT p.lane::int AS lane, p.ord::int AS ord FROM unnest((SELECT prefer FROM clock)) WITH ORDINALITY AS p(lane, ord)
    UNION ALL
    SELECT (g.i + (SELECT start FROM clock)) % 256, 1000 + g.i FROM generate_series(0, 255) AS g(i)
    WHERE ((g.i + (SELECT start FROM clock)) % 256) <> ALL ((SELECT prefer FROM clock)::int[])
    ORDER BY 2
  ) c
  CROSS JOIN LATERAL (
    SELECT l.lane, l.lease_owner, l.in_flight
    FROM /*schema*/relaybus_lanes l
    WHERE l.lane = c.lane
      AND (l.lease_owner IS NULL OR l.lease_expires_at <= (SELECT now FROM clock))
      AND l.lease_owner IS DISTINCT FROM (SELECT owner FROM clock)
      -- Due work? Each probe is the first row of the lane in an index's due order (LIMIT 1 in index order), never a
      -- scan: as EXISTS, Postgres planned a sequential scan of deliveries per lane once the table held a few
      -- thousand rows in a few lanes.
      AND ((SELECT true FROM /*schema*/relaybus_deliveries d
            WHERE d.lane = l.lane AND d.key IS NULL AND d.status = 'pending' AND d.available_at <= (SELECT now FROM clock)
              AND d.handler = ANY ((SELECT handlers FROM clock)::text[])
            ORDER BY d.lane, d.available_at LIMIT 1)
        OR (SELECT true FROM /*schema*/relaybus_deliveries d
            WHERE d.lane = l.lane AND d.key IS NOT NULL AND d.status = 'pending' AND d.available_at <= (SELECT now FROM clock)
              AND d.handler = ANY ((SELECT handlers FROM clock)::text[]) AND cardinality((SELECT held FROM clock)) = 0
            ORDER BY d.lane, d.available_at LIMIT 1)
        -- While a replay runs, its handlers' live keyed rows are held (sql/fragments/runnable-handlers.sql) and fill
        -- the due order: the other handlers are probed one by one, in key order (the due time is written as an
        -- expression so that no plan reads it from keyed_due_idx, through the held rows), and the held ones by their
        -- replayed rows. A held handler's row the hold spares (pending since before the start) runs when its lane is
        -- taken for other work, or after the replay.
        OR (SELECT true FROM unnest((SELECT free FROM clock)) AS h(handler) CROSS JOIN LATERAL (
              SELECT 1 FROM /*schema*/relaybus_deliveries d
              WHERE d.lane = l.lane AND d.handler = h.handler AND d.key IS NOT NULL AND d.status = 'pending'
                AND d.available_at + interval '0' <= (SELECT now FROM clock)
              ORDER BY d.lane, d.handler, d.key, d.sequence LIMIT 1) x
            WHERE cardinality((SELECT held FROM clock)) > 0 LIMIT 1)
        OR (SELECT true FROM /*schema*/relaybus_deliveries d
            WHERE d.lane = l.lane AND d.replay_id IS NOT NULL AND d.key IS NOT NULL AND d.status = 'pending'
              AND d.available_at + interval '0' <= (SELECT now FROM clock)
              AND d.handler = ANY ((SELECT handlers FROM clock)::text[]) AND cardinality((SELECT held FROM clock)) > 0
            ORDER BY d.lane, d.handler, d.key, d.sequence LIMIT 1))
    FOR UPDATE OF l SKIP LOCKED
  ) f
  LIMIT (SELECT take FROM clock)
),
charged AS (
  UPDATE /*schema*/relaybus_deliveries d
  SET attempts = d.attempts + 1,
      claims = d.claims + 1,
      status = CASE WHEN d.attempts + 1 >= d.max_attempts THEN 'dead' ELSE 'pending' END,
      last_error = 'lease expired: lane ' || d.lane || ' was taken over from ' || f.lease_owner
                   || ' while this delivery was in flight (worker crashed or stalled)',
      updated_at = (SELECT now FROM clock)
  FROM free f
  WHERE f.lease_owner IS NOT NULL AND d.id = ANY (f.in_flight) AND d.status = 'pending'
  RETURNING d.id
),
taken AS (
  UPDATE /*schema*/relaybus_lanes l
  SET epoch = l.epoch + 1, lease_owner = $1, in_flight = '{}',
      lease_expires_at = (SELECT now FROM clock) + make_interval(secs => $5::int / 1000.0)
  FROM free f
  WHERE l.lane = f.lane
  RETURNING l.lane
)
SELECT (SELECT count(*) FROM taken)::int AS lanes, (SELECT count(*) FROM charged)::int AS charged
