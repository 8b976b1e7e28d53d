-- look-due: a light load's look at the lanes no wake-up named, before a full claim does it (ClaimHints.freeLanes
--           'when-due'): whether any lane this owner could claim from holds due work that no wake-up announced (a
--           delayed delivery come due, a crashed worker's expired lease, a lost notification): a pending delivery due
--           now (for longer than a wake-up takes, $3) of a handler asked for, in a free lane, in an expired one, or in
--           one this owner holds and not in flight there. When none does, the lanes this owner holds with nothing left
--           in flight are handed back (as claim-held-lanes hands them back), and the caller claims only what a wake-up
--           named; when one does, it hands back nothing and the caller runs its full claim, which finds it.
--           Two index scans with the lanes as an array (a descent a lane), where the full claim is two statements of
--           several times its length: under a light load it runs once per poll interval, and a publish arriving
--           meanwhile waits for it.
-- index: relaybus_lanes (one pass; the owner's rows locked FOR NO KEY UPDATE in lane order, by primary key);
--        relaybus_deliveries_unkeyed_due_idx and relaybus_deliveries_keyed_due_idx (one scan each over the lanes it
--        could claim from: a descent a lane); relaybus_deliveries_pkey (whether a held lane's in-flight ids are gone);
--        relaybus_paused_handlers and relaybus_replays_running_idx (sql/fragments/runnable-handlers.sql)
-- params: $1 owner text, $2 handlers text[] (the paused ones among them are left out), $3 grace ms int (work due for
--         less is taken as announced: the wake-up of a publish that just committed), $4 sibling owners text[] (the
--         other claim loops of this worker: their lanes are not a peer's), $5 now timestamptz (null = now(); $5 as in
--         the claim statements, for sql/fragments/replay-clock.sql)
-- returns: one row: due, whether a lane holds due work unannounced; handed_back, the lanes handed back (empty when
--          due); peer_lanes, how many lanes other workers hold under a lease not expired (neither this owner nor its
--          siblings); replay_clock, as the claims return it (sql/fragments/replay-clock.sql)
-- commit: asynchronous (synchronous_commit off for this statement's own transaction): a lost hand-back leaves a lane
--         held, which the next claim hands back.
WITH clock AS (
  SELECT set_config('synchronous_commit', 'off', true) AS async_commit
),
/*include runnable-handlers*/,
lanes AS MATERIALIZED (
  -- Every lane once (one pass over the table; four lanes a page).
  SELECT l.lane, l.lease_owner, l.lease_expires_at, l.in_flight FROM /*schema*/relaybus_lanes l
),
held AS (
  -- This owner's lanes, locked as claim-held-lanes locks them (one lock order everywhere), found by primary key from
  -- the pass above; the locked row is the latest version.
  SELECT l.lane, l.in_flight, l.xmin AS version FROM /*schema*/relaybus_lanes l
  WHERE l.lane IN (SELECT o.lane FROM lanes o WHERE o.lease_owner = $1) AND l.lease_owner = $1
    AND (SELECT async_commit FROM clock) IS NOT NULL
  ORDER BY l.lane
  FOR NO KEY UPDATE
),
open AS (
  -- The lanes this owner could claim from: free ones, expired ones and its own; and what it has in flight in its own
  -- (an expired lane's in-flight rows are what a takeover runs again, so only this owner's are left out). An id is in
  -- one lane, so leaving out every one of the owner's in-flight ids is leaving out each lane's own.
  SELECT array_agg(l.lane) AS lanes,
         array(SELECT unnest(o.in_flight) FROM lanes o WHERE o.lease_owner = $1) AS in_flight
  FROM lanes l
  WHERE l.lease_owner IS NULL OR l.lease_owner = $1 OR l.lease_expires_at <= coalesce($5::timestamptz, now())
),
due AS MATERIALIZED (
  -- A row that could run now, in a lane this owner could claim from and not in flight there. Nor is a row due for less
  -- than $3 ms: under a steady stream of publishes one is nearly always committed and not yet claimed, its wake-up on
  -- the way. One index scan per due index with the lanes as an array: a descent per lane, in the index's order (the
  -- ORDER BY keeps the planner on it; without it, a small heap's plan read the keyed rows through a bitmap of every
  -- lane), stopping at the first row found, never a scan of the heap. While a replay holds a handler, the full claim
  -- looks (it knows which held rows may run).
  SELECT cardinality((SELECT held FROM runnable)) > 0
    OR coalesce((
      SELECT true FROM /*schema*/relaybus_deliveries d
      WHERE d.lane = ANY ((SELECT lanes FROM open)::smallint[]) AND d.key IS NULL AND d.status = 'pending'
        AND d.available_at <= coalesce($5::timestamptz, now()) - make_interval(secs => $3::int / 1000.0)
        AND d.handler = ANY ((SELECT handlers FROM runnable)::text[])
        AND d.id <> ALL ((SELECT in_flight FROM open)::bigint[])
      ORDER BY d.lane, d.available_at LIMIT 1), false)
    OR coalesce((
      SELECT true FROM /*schema*/relaybus_deliveries d
      WHERE d.lane = ANY ((SELECT lanes FROM open)::smallint[]) AND d.key IS NOT NULL AND d.status = 'pending'
        AND d.available_at <= coalesce($5::timestamptz, now()) - make_interval(secs => $3::int / 1000.0)
        AND d.handler = ANY ((SELECT handlers FROM runnable)::text[])
        AND d.id <> ALL ((SELECT in_flight FROM open)::bigint[])
      ORDER BY d.lane, d.available_at LIMIT 1), false)
    AS found
),
seen AS (
  -- The held lanes unchanged since this statement's snapshot (claim-held-lanes, seen): only their in-flight ids can be
  -- judged gone by the rows this snapshot sees.
  SELECT h.lane, h.in_flight FROM held h JOIN /*schema*/relaybus_lanes s ON s.lane = h.lane AND s.xmin = h.version
),
handed_back AS (
  -- As claim-held-lanes's handed_back: a lane whose listed deliveries are all gone, judged on the locked row's
  -- in_flight.
  UPDATE /*schema*/relaybus_lanes l
  SET lease_owner = NULL, lease_expires_at = NULL, in_flight = '{}'
  FROM seen h
  WHERE l.lane = h.lane AND l.lease_owner = $1 AND NOT (SELECT found FROM due)
    AND NOT EXISTS (SELECT 1 FROM /*schema*/relaybus_deliveries d WHERE d.id = ANY (h.in_flight))
  RETURNING l.lane
)
SELECT (SELECT found FROM due) AS due, ARRAY(SELECT h.lane::text FROM handed_back h) AS handed_back,
       (SELECT count(*) FROM lanes p
        WHERE p.lease_owner <> $1 AND p.lease_owner <> ALL ($4::text[])
          AND p.lease_expires_at > coalesce($5::timestamptz, now()))::int AS peer_lanes,
       /*include replay-clock*/ AS replay_clock
