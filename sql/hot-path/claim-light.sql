-- claim-light: the claim of a dispatcher under a light load (no completion riding, no retried head to look up): pick
--              due heads from the lanes this owner holds and from the free lanes a wake-up named, record them in
--              flight, take a named lane only when it gives work, hand back held lanes that got nothing and run
--              nothing. What claim-held-lanes does without its completion, successor lookups, walk cursors and retry
--              probes: under a light load that statement spends more time initialising its plan's ~150 nodes than
--              running them; this one has about a third as many.
--              Heads: each lane's first pending rows in (handler, key, sequence) order, at most $6 rows a lane;
--              the first row of a (handler, key) is its smallest pending sequence, so only heads are picked and a
--              head in flight holds its key back. A lane whose keys need more than $6 rows is read in part: the
--              rest waits for claim-held-lanes, which the dispatcher runs at least once per poll interval.
--              While a replay of a handler runs, its keyed rows that no replay created do not run (the hold), and
--              are not read: the lane is read handler by handler, the held ones through their replayed rows only, so
--              the live rows piling up behind a backfill cost nothing and crowd no other handler out of the $6 rows.
-- index: relaybus_lanes_pkey (the owner's rows among $8 and the named ones, locked FOR NO KEY UPDATE);
--        relaybus_deliveries_lane_handler_key_sequence_idx (keyed heads); relaybus_deliveries_replayed_idx (the keys
--        with replayed rows pending, while a replay runs); relaybus_deliveries_unkeyed_due_idx
--        (unkeyed); relaybus_deliveries_pkey (pruning finished ids from in_flight, hand-back);
--        relaybus_events_pkey (payload of an event that has an events row); relaybus_paused_handlers and
--        relaybus_replays_running_idx (the hold, and replay_clock)
-- params: $1 owner text, $2 handlers text[] (less the paused ones: sql/fragments/runnable-handlers.sql), $3 limit int, $4 lease_ms int,
--         $5 now timestamptz (null = now()), $6 rows read per lane int, $7 free lanes to take when they give work
--         smallint[], $8 lanes the owner may hold smallint[] (those its claims recorded deliveries in and did not hand
--         back since, and the named ones: see src/postgres/recorded-lanes.ts; a held lane not listed waits for
--         claim-held-lanes, which finds them by owner)
-- returns: one row as claim-held-lanes's: claimed (sql/fragments/claimed-rows.sql; early always false, after always
--          null: no followers), lane_epochs, skipped_lanes (held lanes changed while this statement waited for them: see
--          claim-held-lanes, seen), handed_back;
--          completed_ids, walk_ends and peer_lanes always NULL (it does not count peers: the dispatcher keeps what
--          the last claim-held-lanes reported); replay_clock as claim-held-lanes's
-- commit: asynchronous, as claim-held-lanes (a lost claim is a redelivery)
WITH clock AS (
  SELECT set_config('synchronous_commit', 'off', true) AS async_commit
),
/*include runnable-handlers*/,
held AS (
  -- As in claim-held-lanes: a concurrent claim of the same owner waits; one lock order (by lane) everywhere. Probed by
  -- key: finding the owner's rows by lease_owner read every page of the table (64-90 pages, four lanes a page).
  SELECT l.lane, l.in_flight, l.xmin AS version FROM /*schema*/relaybus_lanes l
  WHERE l.lane = ANY ($8::smallint[]) AND l.lease_owner = $1 AND (SELECT async_commit FROM clock) IS NOT NULL
  ORDER BY l.lane
  FOR NO KEY UPDATE
),
named AS (
  SELECT l.lane, l.in_flight, l.xmin AS version FROM /*schema*/relaybus_lanes l
  WHERE l.lane = ANY ($7::smallint[]) AND l.lease_owner IS NULL
  ORDER BY l.lane
  FOR NO KEY UPDATE SKIP LOCKED
),
seen AS (
  -- Lanes unchanged since this statement's snapshot (see claim-held-lanes, seen).
  SELECT h.lane, h.in_flight
  FROM (SELECT * FROM held UNION ALL SELECT * FROM named) h
  JOIN /*schema*/relaybus_lanes s ON s.lane = h.lane AND s.xmin = h.version
),
candidates AS (
  SELECT c.* FROM seen s CROSS JOIN LATERAL (
    -- No replay runs: each lane's first rows in key order, every handler's.
    (SELECT DISTINCT ON (d.handler, d.key) d.id, d.lane, d.event_id, d.handler, d.key, d.sequence, d.attempts,
            d.max_attempts, d.claims, d.available_at, d.created_at, d.event_type, d.payload, d.headers, d.replay_id
     FROM (SELECT * FROM /*schema*/relaybus_deliveries d
           WHERE d.lane = s.lane AND d.key IS NOT NULL AND d.status = 'pending'
             AND cardinality((SELECT held FROM runnable)) = 0
           ORDER BY d.handler, d.key, d.sequence LIMIT $6::int) d
     ORDER BY d.handler, d.key, d.sequence)
    UNION ALL
    -- While a replay runs: the first rows of each handler it does not hold, read handler by handler, so the held
    -- handlers' live rows (which pile up while it runs) are never read and never crowd the others out of $6.
    (SELECT k.* FROM unnest((SELECT handlers FROM runnable)::text[]) AS r(handler)
     CROSS JOIN LATERAL (
       SELECT DISTINCT ON (d.key) d.id, d.lane, d.event_id, d.handler, d.key, d.sequence, d.attempts,
              d.max_attempts, d.claims, d.available_at, d.created_at, d.event_type, d.payload, d.headers, d.replay_id
       FROM (SELECT * FROM /*schema*/relaybus_deliveries d
             WHERE d.lane = s.lane AND d.handler = r.handler AND d.key IS NOT NULL AND d.status = 'pending'
             ORDER BY d.key, d.sequence LIMIT $6::int) d
       ORDER BY d.key, d.sequence
     ) k
     WHERE cardinality((SELECT held FROM runnable)) > 0 AND r.handler <> ALL ((SELECT held FROM runnable)::text[]))
    UNION ALL
    -- While a replay runs: the heads of the held handlers' keys that have replayed rows pending, found through their
    -- own index (as claim-held-lanes's replayed). A head may be a row published before the start (the hold spares
    -- it); one whose key has no replayed row pending waits for claim-held-lanes or the replay's end.
    (SELECT n.* FROM (
       SELECT DISTINCT x.handler, x.key FROM (
         SELECT d.handler, d.key FROM /*schema*/relaybus_deliveries d
         WHERE d.lane = s.lane AND d.replay_id IS NOT NULL AND d.key IS NOT NULL AND d.status = 'pending'
           AND cardinality((SELECT held FROM runnable)) > 0
         ORDER BY d.handler, d.key, d.sequence LIMIT $6::int
       ) x
     ) k
     CROSS JOIN LATERAL (/*include key-head*/) n)
    UNION ALL
    (SELECT d.id, d.lane, d.event_id, d.handler, d.key, d.sequence, d.attempts, d.max_attempts, d.claims,
            d.available_at, d.created_at, d.event_type, d.payload, d.headers, d.replay_id
     FROM /*schema*/relaybus_deliveries d
     WHERE d.lane = s.lane AND d.key IS NULL AND d.status = 'pending' AND d.available_at <= coalesce($5::timestamptz, now())
       AND d.handler = ANY ((SELECT handlers FROM runnable)::text[]) AND d.id <> ALL (s.in_flight)
     ORDER BY d.available_at, d.id LIMIT $3::int)
  ) c
  WHERE c.available_at <= coalesce($5::timestamptz, now()) AND c.handler = ANY ((SELECT handlers FROM runnable)::text[]) AND c.id <> ALL (s.in_flight)
    -- The hold (sql/fragments/runnable-handlers.sql): a held keyed head keeps its key back.
    AND (c.key IS NULL OR c.replay_id IS NOT NULL OR c.handler <> ALL ((SELECT held FROM runnable)::text[])
         OR c.sequence < (SELECT hold_from FROM runnable))
),
picked AS (
  SELECT c.*, NULL::bigint AS after FROM candidates c ORDER BY c.available_at, c.id LIMIT $3::int
),
grouped AS (
  SELECT lane, array_agg(id ORDER BY id) AS ids FROM picked GROUP BY lane
),
recorded AS (
  UPDATE /*schema*/relaybus_lanes l
  SET epoch = CASE WHEN l.lease_owner IS NULL THEN l.epoch + 1 ELSE l.epoch END, lease_owner = $1,
      in_flight = ARRAY(
        SELECT f FROM unnest(l.in_flight) AS f
        WHERE EXISTS (SELECT 1 FROM /*schema*/relaybus_deliveries d WHERE d.id = f)) || g.ids,
      lease_expires_at = coalesce($5::timestamptz, now()) + make_interval(secs => $4::int / 1000.0)
  FROM grouped g
  WHERE l.lane = g.lane AND (l.lease_owner = $1 OR (l.lease_owner IS NULL AND l.lane = ANY ($7::smallint[])))
  RETURNING l.lane, l.epoch
),
handed_back AS (
  UPDATE /*schema*/relaybus_lanes l
  SET lease_owner = NULL, lease_expires_at = NULL, in_flight = '{}'
  FROM seen h
  -- h.in_flight, the locked row's (see claim-held-lanes).
  WHERE l.lane = h.lane AND l.lease_owner = $1
    AND l.lane NOT IN (SELECT lane FROM grouped)
    AND NOT EXISTS (SELECT 1 FROM /*schema*/relaybus_deliveries d WHERE d.id = ANY (h.in_flight))
  RETURNING l.lane
),
summary AS MATERIALIZED (
  SELECT ((SELECT count(*) FROM held) + (SELECT count(*) FROM named) - (SELECT count(*) FROM seen))::int AS lanes,
         ARRAY(SELECT h.lane::text FROM handed_back h) AS handed_back
)
-- One row: the claimed deliveries as one JSON value (sql/fragments/claimed-rows.sql), then the summary.
SELECT /*include claimed-rows*/ AS claimed, ARRAY(SELECT r.lane || ':' || r.epoch FROM recorded r) AS lane_epochs,
       NULL::text[] AS completed_ids, k.lanes AS skipped_lanes, k.handed_back,
       NULL::text[] AS walk_ends, NULL::int AS peer_lanes, /*include replay-clock*/ AS replay_clock
FROM summary k
