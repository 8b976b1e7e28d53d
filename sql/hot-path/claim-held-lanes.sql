-- claim-held-lanes: complete the previous batch (when leases are given) and pick due deliveries from the lanes this
--                   owner holds and from the free lanes it names ($17: the lanes a wake-up named, those of retried heads
--                   due again), recording them in flight; a named lane is taken only when it gives work; hand back held
--                   lanes that got nothing and run nothing. One round trip per cycle: the completion rides on the next
--                   claim, and a delivery published into a free lane needs no acquire-lanes first.
--                   Completion: as complete-many (fenced by lane epoch, in_flight and the delivery's claims counter),
--                   plus a history row per delivery when $13 (sql/fragments/completion-history.sql). A completed
--                   keyed delivery was its key's head when claimed, and every sequence given later (publish, requeue)
--                   is larger while reschedule, bury, release and takeover keep theirs; so the smallest pending
--                   sequence above it is its key's new head, picked directly (no probe) if due.
--                   Unkeyed rows come oldest first. Keyed rows come from a walk over the lane's keys, one step per
--                   (handler, key): the key's first pending row is its head, the only one that may run, so blocked
--                   followers are never read and no backlog shape can hide a due head. The walk starts after the key
--                   this owner picked last in the lane (a cursor the store keeps) and wraps around, so every key gets
--                   its turn even when the batch fills before the walk ends.
--                   Hold: while a replay of a handler runs, its keyed rows that no replay created do not run unless
--                   the hold spares them (a head held so blocks its key; a follower held so ends its run); see
--                   sql/fragments/runnable-handlers.sql. The walk passes over such a handler's keys in one step, and
--                   the heads of its keys with replayed rows come from those rows' own index (see replayed).
--                   Followers ($19): each due keyed head (not a probe) brings its key's next rows beyond the limit, as
--                   long as each is due and not in flight, marked with the row that must succeed first; the worker
--                   runs them one after another and releases the rest of a run whose row fails. A claim brings at
--                   most $21 rows, heads and followers (the store's claim: $3 x (1 + $19), less what its earlier
--                   statements brought): when it found fewer heads than $3, the room they leave goes to their
--                   followers (up to 100 a head), so a few deep keys drain in long runs instead of $19 + 1 a claim.
-- index: relaybus_lanes (the owner's rows, locked FOR NO KEY UPDATE); relaybus_deliveries_unkeyed_due_idx (unkeyed,
--        capped at each lane's share); relaybus_deliveries_lane_handler_key_sequence_idx (the walk: one descent per key;
--        successors); relaybus_deliveries_pkey (completion, pruning finished ids from in_flight);
--        relaybus_deliveries_keyed_due_idx (fresh: the newest rows of a named lane, read backwards);
--        relaybus_deliveries_replayed_idx (replayed: only while a replay runs);
--        relaybus_events_pkey (payload, history; an event published inline has none: its deliveries carry it, and the
--        claim reads it with the rest of the row); relaybus_paused_handlers and
--        relaybus_replays_running_idx (sql/fragments/runnable-handlers.sql, and replay-clock.sql)
-- params: $1 owner text, $2 handlers text[] (the paused ones among them are left out: see runnable), $3 limit int,
--         $4 lease_ms int, $5 now timestamptz (null = now()), $6 cursor lanes smallint[], $7 cursor handlers text[], $8 cursor keys text[] (where each lane's walk resumes),
--         $9 completed delivery ids bigint[], $10 their lanes smallint[], $11 epochs bigint[], $12 claims int[] (empty:
--         nothing to complete), $13 completion history boolean, $14 probe lanes smallint[], $15 probe handlers text[],
--         $16 probe keys text[] (keys whose head this owner rescheduled and that are due again: looked up directly,
--         from the lowest sequence: a replayed row's may be negative),
--         $17 lanes a wake-up or a retry named smallint[]: a free one is taken when it gives work (lanes held by
--         anyone else, or expired, are left alone), and in each one this owner holds or takes, the newest keyed rows
--         that are their key's head run first (see fresh),
--         $18 retry lookahead ms int (a probed head due within it is claimed now and flagged early: the worker starts
--         it when due, and the key is in flight meanwhile, so nothing of it runs early), $19 followers int (how many
--         of its key's next due deliveries each keyed head brings, beyond $3, at least, with the room fewer heads leave;
--         0: none), $20 sibling owners text[] (the other claim loops of this worker: their lanes are not a peer's),
--         $21 rows int (the most this statement may bring, heads and followers; at least $3)
-- returns: one row: claimed, the claimed deliveries as one JSON text (sql/fragments/claimed-rows.sql: each with
--          whether it was claimed before it was due, early: only a probed head, see $18; probed heads, then a
--          wake-up's new heads, then the others oldest due first, then their followers; NULL when nothing was picked);
--          lane_epochs, 'lane:epoch' of each lane recorded in flight
--          (the epoch of a claimed delivery's lease is its lane's); completed_ids, NULL when every listed lease was
--          completed (the common case: no id is sent back), else the ids completed; skipped_lanes, how many held lanes
--          were skipped because they changed while this statement waited for them (see seen; the store asks again
--          with a fresh snapshot); handed_back, the lanes handed back (the store drops their walk cursors: a lane taken
--          again starts afresh); walk_ends, lane, handler and key in turn, where each walked lane's walk resumes (the
--          store sends them back as $6-$8); peer_lanes, how many lanes other workers hold under a lease not expired
--          (neither this owner nor its siblings: a 256-row scan, so the dispatcher knows whether it is alone);
--          replay_clock, this statement's time in ms while a replay runs, else NULL (sql/fragments/replay-clock.sql)
-- commit: asynchronous (synchronous_commit off for this statement's own transaction): a crash of the server may lose
--         it, which only means a redelivery (at-least-once), never a lost delivery; see docs/guide/guarantees.md.
-- plan: the time is written out as coalesce($5, now()) wherever it is needed (the same value within the statement's
--       transaction): a scalar subquery over a CTE is two more plan nodes, and under a light load this statement spends
--       more time initialising its plan's nodes than running them. For the same reason the summary row is materialized.
WITH RECURSIVE clock AS (
  SELECT set_config('synchronous_commit', 'off', true) AS async_commit
),
/*include runnable-handlers*/,
held AS (
  -- Locked, so a concurrent claim of the same owner waits; a transactional completion's FOR KEY SHARE does not
  -- conflict. The locked row is the latest version: its xmin tells whether it changed since this statement's snapshot.
  SELECT l.lane, l.epoch, l.in_flight, l.xmin AS version FROM /*schema*/relaybus_lanes l WHERE l.lease_owner = $1
  ORDER BY l.lane -- one lock order for every statement that locks several lanes: no deadlock
  FOR NO KEY UPDATE
),
named AS (
  -- Free lanes named by the caller, locked so no other claimer takes them meanwhile (SKIP LOCKED: one that is being
  -- taken is left to its taker). Taken in `recorded` only when work is picked from them; the others stay free.
  SELECT l.lane, l.in_flight, l.xmin AS version FROM /*schema*/relaybus_lanes l
  WHERE l.lane = ANY ($17::smallint[]) AND l.lease_owner IS NULL
  ORDER BY l.lane
  FOR NO KEY UPDATE SKIP LOCKED
),
deleted AS (
  DELETE FROM /*schema*/relaybus_deliveries d
  USING unnest($9::bigint[], $10::smallint[], $11::bigint[], $12::int[]) AS t(id, lane, epoch, claims)
  WHERE d.id = t.id AND d.lane = t.lane AND d.claims = t.claims AND d.status = 'pending'
    -- The fence: listed in flight in its lane, which this owner holds at the lease's epoch (a lane taken over has a
    -- newer epoch, one handed back or relinquished lists nothing, so no other lane can pass). Judged on held's locked
    -- rows, read once: the ids by one hash, the lanes and epochs by another (an id is only ever listed in its own
    -- lane), rather than a search of the lane's array for each row (costly with many deliveries in flight a lane). NOT ... NOT IN is IN here (no value is NULL) and is a hashed subplan for certain: IN
    -- became a semi-join the planner could drive from held's side, misjudging its size, with a pass over every
    -- in-flight id for each completed one.
    AND NOT (t.id NOT IN (SELECT unnest(h.in_flight) FROM held h))
    AND NOT ((t.lane, t.epoch) NOT IN (SELECT h.lane, h.epoch FROM held h))
    AND (SELECT async_commit FROM clock) IS NOT NULL
  RETURNING d.id, d.lane, d.event_id, d.event_type, d.handler, d.key, d.sequence, d.attempts, d.max_attempts, d.created_at
),
history_params AS (
  SELECT $13::boolean AS enabled, coalesce($5::timestamptz, now()) AS completed_at
),
/*include completion-history*/,
finished AS (
  -- Completed now: still visible to this statement's snapshot, so named explicitly wherever in_flight is judged.
  SELECT lane, array_agg(id) AS ids FROM deleted GROUP BY lane
),
seen AS (
  -- The held lanes whose row did not change since this statement's snapshot, the only ones it may pick from or hand
  -- back: the delivery rows read below are the snapshot's. A lane changed meanwhile (a claim of the same owner that
  -- picked and pruned, a reschedule, bury, release or renewal) can list in flight a delivery the snapshot cannot see,
  -- or no longer list one the snapshot still shows pending though it was completed: picking from it could hand out a
  -- completed head again, out of key order. It is skipped this once, still held; the next claim sees it afresh.
  -- The same holds for a named free lane: one released since the snapshot may have had deliveries completed meanwhile.
  SELECT h.lane, h.in_flight
  FROM (SELECT lane, in_flight, version FROM held UNION ALL SELECT lane, in_flight, version FROM named) h
  JOIN /*schema*/relaybus_lanes s ON s.lane = h.lane AND s.xmin = h.version
),
busy AS (
  -- The ids in flight in the lanes picked from, listed once: each row read below is checked against them by a hash
  -- lookup (NOT IN over this CTE is a hashed subplan, built once per statement). `<> ALL (in_flight)` scanned the lane's
  -- array for every row read, and under a keyed backlog a lane lists hundreds (650 seen at 5,000 in flight an owner):
  -- with the same scan of the finished ids in `recorded`, the largest part of the claim's own time.
  SELECT unnest(s.in_flight) AS id FROM seen s
),
direct AS (
  -- Heads looked up at once instead of when the walk comes round to their key: the next pending row of each
  -- completed keyed delivery's key (its new head, see the header), and the head of each key whose retried head is
  -- due again (the store remembers its own reschedules). Probed heads go first in a full batch: they waited out a
  -- backoff and would sort last by due time. A probed head due within the lookahead ($18) comes too: a claim takes
  -- tens of milliseconds under a backlog, and one that waited for the head to be due would start it a claim or two
  -- late.
  SELECT n.id, n.lane, n.event_id, n.handler, n.key, n.sequence, n.attempts, n.max_attempts, n.claims,
         n.available_at, n.created_at, n.event_type, n.payload, n.headers, NULL::int AS walk_step, q.rank
  FROM (
    -- One lookup per key: a key whose head and followers complete together has one new head, after the last of them.
    SELECT c.lane, c.handler, c.key, max(c.sequence) AS after, 2 AS rank FROM deleted c WHERE c.key IS NOT NULL
    GROUP BY c.lane, c.handler, c.key
    UNION ALL
    SELECT p.lane, p.handler, p.key, '-9223372036854775808'::bigint, 0 FROM unnest($14::smallint[], $15::text[], $16::text[]) AS p(lane, handler, key)
  ) q
  JOIN seen s ON s.lane = q.lane
  CROSS JOIN LATERAL (
    SELECT d.id, d.lane, d.event_id, d.handler, d.key, d.sequence, d.attempts, d.max_attempts, d.claims,
           d.available_at, d.created_at, d.event_type, d.payload, d.headers, d.replay_id
    FROM /*schema*/relaybus_deliveries d
    WHERE d.lane = q.lane AND d.handler = q.handler AND d.key = q.key AND d.sequence > q.after
      AND d.key IS NOT NULL AND d.status = 'pending'
      -- A held handler's key is looked up below its bound only (runnable's held_bounds): a held row is not read.
      AND d.sequence < coalesce(CASE WHEN cardinality((SELECT held FROM runnable)) > 0 THEN (
            SELECT u.bound
            FROM unnest((SELECT held FROM runnable), (SELECT held_bounds FROM runnable)) AS u(handler, bound)
            WHERE u.handler = q.handler) END, '9223372036854775807'::bigint)
    ORDER BY d.handler, d.key, d.sequence
    LIMIT 1
  ) n
  WHERE n.available_at <= coalesce($5::timestamptz, now()) + CASE WHEN q.rank = 0 THEN make_interval(secs => $18::int / 1000.0) ELSE interval '0' END
    AND n.handler = ANY ((SELECT handlers FROM runnable)::text[]) AND n.id NOT IN (SELECT id FROM busy)
    AND (n.replay_id IS NOT NULL OR n.handler <> ALL ((SELECT held FROM runnable)::text[])
         OR n.sequence < (SELECT hold_from FROM runnable))
),
share AS (
  -- Each lane's share of what the direct lookups left of the batch, doubled so lanes with little due work leave room to
  -- the others, and at least 2: under a keyed backlog the successors of the completed heads fill most of each batch,
  -- and a walk sized for the whole batch would read heads only to drop them, but every lane still gives other keys
  -- their turn in each claim.
  -- visits: how many keys a lane's walk may visit. While successors fill at least half the batch, the keys of a held
  -- lane are mostly in flight and a walk that looked for its share would visit nearly all of them in every claim
  -- (80-90 descents for ~10 heads found, a fifth of the claim); it visits twice its share instead, and the next claim,
  -- which such a flow brings at once, goes on from there (see walk_end). Otherwise a walk goes round its whole lane if
  -- it must: a due head behind any number of blocked keys is found by the first claim that walks its lane.
  SELECT d.rows, CASE WHEN d.direct * 2 >= $3::int THEN d.rows * 2 ELSE 2147483647 END AS visits
  FROM (SELECT (greatest($3::int - (SELECT count(*) FROM direct), 0)::int / greatest(count(*), 1)::int + 1) * 2 AS rows,
               (SELECT count(*) FROM direct) AS direct
        FROM seen) d
),
unkeyed AS (
  SELECT c.* FROM seen s CROSS JOIN LATERAL (
    SELECT d.id, d.lane, d.event_id, d.handler, d.key, d.sequence, d.attempts, d.max_attempts, d.claims,
           d.available_at, d.created_at, d.event_type, d.payload, d.headers, NULL::int AS walk_step, 2 AS rank
    FROM /*schema*/relaybus_deliveries d
    WHERE d.lane = s.lane AND d.key IS NULL AND d.status = 'pending' AND d.available_at <= coalesce($5::timestamptz, now())
      AND d.handler = ANY ((SELECT handlers FROM runnable)::text[]) AND d.id NOT IN (SELECT id FROM busy)
    ORDER BY d.available_at, d.id
    LIMIT (SELECT rows FROM share)
  ) c
),
walk AS (
  -- One row per visited key: its head, whether it can run now (due, a handler asked for, not in flight), and how
  -- many of this lane's visited heads could. Stops at the lane's share, after its visits (see share), or once it is
  -- back at its start.
  SELECT s.lane, st.handler AS start_handler, st.key AS start_key, n.*, 1 AS step,
         (n.available_at <= coalesce($5::timestamptz, now()) AND n.handler = ANY ((SELECT handlers FROM runnable)::text[]) AND n.id NOT IN (SELECT id FROM busy)
          AND (n.replay_id IS NOT NULL OR n.handler <> ALL ((SELECT held FROM runnable)::text[])
               OR n.sequence < (SELECT hold_from FROM runnable)))::int AS found
  FROM seen s
  CROSS JOIN LATERAL (
    SELECT coalesce(c.handler, '') AS handler, coalesce(c.key, '') AS key
    FROM (SELECT 1) one
    LEFT JOIN unnest($6::smallint[], $7::text[], $8::text[]) AS c(lane, handler, key) ON c.lane = s.lane
    LIMIT 1
  ) st
  CROSS JOIN LATERAL (
    (SELECT d.id, d.handler, d.key, d.available_at, d.event_id, d.sequence, d.attempts, d.max_attempts, d.claims, d.created_at, d.event_type, d.payload, d.headers, d.replay_id, false AS wrapped FROM /*schema*/relaybus_deliveries d
     WHERE d.lane = s.lane AND d.key IS NOT NULL AND d.status = 'pending' AND (d.handler, d.key) > (st.handler, st.key)
     ORDER BY d.handler, d.key, d.sequence LIMIT 1)
    UNION ALL
    (SELECT d.id, d.handler, d.key, d.available_at, d.event_id, d.sequence, d.attempts, d.max_attempts, d.claims, d.created_at, d.event_type, d.payload, d.headers, d.replay_id, true FROM /*schema*/relaybus_deliveries d
     WHERE d.lane = s.lane AND d.key IS NOT NULL AND d.status = 'pending'
     ORDER BY d.handler, d.key, d.sequence LIMIT 1)
    LIMIT 1
  ) n
  WHERE NOT (n.wrapped AND (n.handler, n.key) > (st.handler, st.key))
  UNION ALL
  SELECT w.lane, w.start_handler, w.start_key, n.*, w.step + 1,
         w.found + (n.available_at <= coalesce($5::timestamptz, now()) AND n.handler = ANY ((SELECT handlers FROM runnable)::text[]) AND n.id NOT IN (SELECT id FROM busy)
                    AND (n.replay_id IS NOT NULL OR n.handler <> ALL ((SELECT held FROM runnable)::text[])
                         OR n.sequence < (SELECT hold_from FROM runnable)))::int
  FROM walk w
  CROSS JOIN LATERAL (
    -- The keys of a held handler, and of one this claim does not run (not asked for, or paused), are passed over in
    -- one step (the second bound: past its last key): a held handler's live rows wait and its replayed heads come from
    -- replayed, and the others' rows are not this claim's, so visiting each of their keys (every key they have in the
    -- lane, in every claim: a paused handler's backlog) would find nothing. Handler names are never empty: '' bounds
    -- nothing.
    (SELECT d.id, d.handler, d.key, d.available_at, d.event_id, d.sequence, d.attempts, d.max_attempts, d.claims, d.created_at, d.event_type, d.payload, d.headers, d.replay_id, w.wrapped AS wrapped FROM /*schema*/relaybus_deliveries d
     WHERE d.lane = w.lane AND d.key IS NOT NULL AND d.status = 'pending' AND (d.handler, d.key) > (w.handler, w.key)
       AND d.handler > CASE WHEN w.handler = ANY ((SELECT held FROM runnable)::text[])
                              OR w.handler <> ALL ((SELECT handlers FROM runnable)::text[]) THEN w.handler ELSE '' END
     ORDER BY d.handler, d.key, d.sequence LIMIT 1)
    UNION ALL
    (SELECT d.id, d.handler, d.key, d.available_at, d.event_id, d.sequence, d.attempts, d.max_attempts, d.claims, d.created_at, d.event_type, d.payload, d.headers, d.replay_id, true FROM /*schema*/relaybus_deliveries d
     WHERE d.lane = w.lane AND d.key IS NOT NULL AND d.status = 'pending' AND NOT w.wrapped
     ORDER BY d.handler, d.key, d.sequence LIMIT 1)
    LIMIT 1
  ) n
  WHERE w.found < (SELECT rows FROM share) AND w.step < (SELECT visits FROM share)
    AND NOT (n.wrapped AND (n.handler, n.key) > (w.start_handler, w.start_key))
),
keyed AS (
  -- The walk carries each head's columns (its index scan read the row anyway): no second lookup.
  SELECT w.id, w.lane, w.event_id, w.handler, w.key, w.sequence, w.attempts, w.max_attempts, w.claims,
         w.available_at, w.created_at, w.event_type, w.payload, w.headers, w.step AS walk_step, 2 AS rank
  FROM walk w
  WHERE w.available_at <= coalesce($5::timestamptz, now()) AND w.handler = ANY ((SELECT handlers FROM runnable)::text[]) AND w.id NOT IN (SELECT id FROM busy)
    AND (w.replay_id IS NOT NULL OR w.handler <> ALL ((SELECT held FROM runnable)::text[])
         OR w.sequence < (SELECT hold_from FROM runnable))
),
replayed AS (
  -- While a replay runs (held is not empty): the heads of the keys that have replayed rows pending, found through
  -- their own index (relaybus_deliveries_replayed_idx: no published row), at most the lane's share of keys a lane; the
  -- walk passes over the held handlers' keys. A key's head may be a row published before the start that its
  -- replayed rows follow (the hold spares it: see sql/fragments/runnable-handlers.sql); it runs first.
  SELECT n.id, n.lane, n.event_id, n.handler, n.key, n.sequence, n.attempts, n.max_attempts, n.claims,
         n.available_at, n.created_at, n.event_type, n.payload, n.headers, NULL::int AS walk_step, 2 AS rank
  FROM seen s
  CROSS JOIN LATERAL (
    SELECT DISTINCT r.handler, r.key FROM (
      SELECT d.handler, d.key FROM /*schema*/relaybus_deliveries d
      WHERE d.lane = s.lane AND d.replay_id IS NOT NULL AND d.key IS NOT NULL AND d.status = 'pending'
      ORDER BY d.handler, d.key, d.sequence
      LIMIT (SELECT rows FROM share)
    ) r
  ) k
  CROSS JOIN LATERAL (/*include key-head*/) n
  WHERE cardinality((SELECT held FROM runnable)) > 0
    AND n.available_at <= coalesce($5::timestamptz, now()) AND n.handler = ANY ((SELECT handlers FROM runnable)::text[])
    AND n.id NOT IN (SELECT id FROM busy)
    AND (n.replay_id IS NOT NULL OR n.handler <> ALL ((SELECT held FROM runnable)::text[])
         OR n.sequence < (SELECT hold_from FROM runnable))
),
fresh AS (
  -- The newest keyed rows of each lane a wake-up named ($17: what a publish just committed there), the ones that are
  -- their key's head and can run now: they come at once and before the backlog's heads (rank 1), instead of when the
  -- lane's walk comes round to their key. Under a backlog or a replay the walk visits a few keys of a lane a claim
  -- (see share), and live work waited several claims for it.
  SELECT n.id, n.lane, n.event_id, n.handler, n.key, n.sequence, n.attempts, n.max_attempts, n.claims,
         n.available_at, n.created_at, n.event_type, n.payload, n.headers, NULL::int AS walk_step, 1 AS rank
  FROM seen s
  CROSS JOIN LATERAL (
    SELECT d.id, d.lane, d.event_id, d.handler, d.key, d.sequence, d.attempts, d.max_attempts, d.claims,
           d.available_at, d.created_at, d.event_type, d.payload, d.headers, d.replay_id
    FROM /*schema*/relaybus_deliveries d
    WHERE d.lane = s.lane AND d.key IS NOT NULL AND d.status = 'pending'
    ORDER BY d.available_at DESC
    LIMIT 4
  ) n
  WHERE s.lane = ANY ($17::smallint[]) AND n.available_at <= coalesce($5::timestamptz, now())
    AND n.handler = ANY ((SELECT handlers FROM runnable)::text[]) AND n.id NOT IN (SELECT id FROM busy)
    AND (n.replay_id IS NOT NULL OR n.handler <> ALL ((SELECT held FROM runnable)::text[])
         OR n.sequence < (SELECT hold_from FROM runnable))
    AND NOT EXISTS (
      SELECT 1 FROM /*schema*/relaybus_deliveries x
      WHERE x.lane = n.lane AND x.handler = n.handler AND x.key = n.key AND x.sequence < n.sequence
        AND x.key IS NOT NULL AND x.status = 'pending')
),
heads AS (
  -- A head can come by several ways (the walk, a probe, a wake-up, a replayed key): once, with its lowest rank (rank
  -- 0, a probe: a retried head goes first in a full batch; the walk's row would sort it last, by its late due time)
  -- and the walk's step when the walk found it (walk_end counts the walk's heads taken).
  SELECT * FROM (
    SELECT DISTINCT ON (c.id) c.id, c.lane, c.event_id, c.handler, c.key, c.sequence, c.attempts, c.max_attempts,
           c.claims, c.available_at, c.created_at, c.event_type, c.payload, c.headers,
           min(c.walk_step) OVER (PARTITION BY c.id) AS walk_step, c.rank
    FROM (
      SELECT * FROM unkeyed UNION ALL SELECT * FROM keyed UNION ALL SELECT * FROM direct UNION ALL SELECT * FROM fresh
      UNION ALL SELECT * FROM replayed
    ) c
    ORDER BY c.id, c.rank
  ) c
  ORDER BY c.rank, c.available_at, c.id
  LIMIT $3::int
),
followers AS (
  -- Up to $19 rows after each due keyed head that is not a probe (those wait out a backoff), in its key's order, as
  -- long as each is due and not in flight: the head's key's next deliveries, read by the scan that continues from
  -- the head instead of one descent each in later claims. A row not due ends its key's run (nothing after it may run
  -- first). after: the row that must succeed before this one starts (the head, or the follower before it).
  -- The claim's rows stay within $21 ($3 x (1 + $19) for a claim's first statement), and a claim that found fewer
  -- heads gives each more followers (up to 100, MAX_FOLLOWERS): a few deep keys then drain in long runs, a fraction of
  -- the statements they took at $19 + 1 a claim. Each run is one key's, in order, as with $19 (the invariant of the
  -- header).
  SELECT r.id, r.lane, r.event_id, r.handler, r.key, r.sequence, r.attempts, r.max_attempts, r.claims,
         r.available_at, r.created_at, r.event_type, r.payload, r.headers, NULL::int AS walk_step, 3 AS rank, r.after
  FROM heads h
  CROSS JOIN LATERAL (
    SELECT x.*, bool_and(x.ok) OVER (ORDER BY x.sequence) AS run, lag(x.id, 1, h.id) OVER (ORDER BY x.sequence) AS after
    FROM (
      SELECT d.id, d.lane, d.event_id, d.handler, d.key, d.sequence, d.attempts, d.max_attempts, d.claims,
             d.available_at, d.created_at, d.event_type, d.payload, d.headers,
             d.available_at <= coalesce($5::timestamptz, now()) AND d.id NOT IN (SELECT id FROM busy)
             AND (d.replay_id IS NOT NULL OR d.handler <> ALL ((SELECT held FROM runnable)::text[])
                  OR d.sequence < (SELECT hold_from FROM runnable)) AS ok
      FROM /*schema*/relaybus_deliveries d
      WHERE d.lane = h.lane AND d.handler = h.handler AND d.key = h.key AND d.sequence > h.sequence
        AND d.key IS NOT NULL AND d.status = 'pending'
        -- A held handler's run ends below its bound (runnable's held_bounds): the held rows behind it are not read.
        AND d.sequence < coalesce(CASE WHEN cardinality((SELECT held FROM runnable)) > 0 THEN (
              SELECT u.bound
              FROM unnest((SELECT held FROM runnable), (SELECT held_bounds FROM runnable)) AS u(handler, bound)
              WHERE u.handler = h.handler) END, '9223372036854775807'::bigint)
      ORDER BY d.handler, d.key, d.sequence
      -- The room the heads leave, shared by the keyed ones: $19 when the batch is full of keyed heads, more otherwise.
      LIMIT least(100, ($21::int - (SELECT count(*) FROM heads)::int)
        / greatest((SELECT count(*) FROM heads WHERE key IS NOT NULL AND rank > 0)::int, 1))
    ) x
  ) r
  WHERE $19::int > 0 AND h.key IS NOT NULL AND h.rank > 0 AND r.run
),
picked AS (
  SELECT h.id, h.lane, h.event_id, h.handler, h.key, h.sequence, h.attempts, h.max_attempts, h.claims,
         h.available_at, h.created_at, h.event_type, h.payload, h.headers, h.walk_step, h.rank, NULL::bigint AS after
  FROM heads h
  UNION ALL
  SELECT * FROM followers
),
grouped AS (
  SELECT lane, array_agg(id ORDER BY id) AS ids FROM picked GROUP BY lane
),
recorded AS (
  -- A named free lane that gave work is taken here (a new epoch, as acquire-lanes takes one).
  UPDATE /*schema*/relaybus_lanes l
  SET epoch = CASE WHEN l.lease_owner IS NULL THEN l.epoch + 1 ELSE l.epoch END, lease_owner = $1,
      in_flight = ARRAY(
        SELECT f FROM unnest(l.in_flight) AS f
        -- The finished ids hashed once (a hashed subplan), not searched for each id in flight.
        WHERE f NOT IN (SELECT id FROM deleted)
          AND EXISTS (SELECT 1 FROM /*schema*/relaybus_deliveries d WHERE d.id = f)) || g.ids,
      lease_expires_at = coalesce($5::timestamptz, now()) + make_interval(secs => $4::int / 1000.0)
  FROM grouped g
  WHERE l.lane = g.lane AND (l.lease_owner = $1 OR (l.lease_owner IS NULL AND l.lane IN (SELECT lane FROM named)))
  RETURNING l.lane, l.epoch
),
walk_end AS (
  -- Where each walked lane's walk resumes next time: after its last visited key or, when the batch left out a head the
  -- walk found, after the last head of the walk it took (the ones left out keep their turn). Lanes held from now on only.
  SELECT w.lane, w.handler, w.key
  FROM (
    SELECT v.lane, CASE WHEN coalesce(f.found, 0) > coalesce(p.taken, 0) THEN p.last ELSE v.visited END AS step
    FROM (SELECT lane, max(step) AS visited FROM walk GROUP BY lane) v
    LEFT JOIN (SELECT lane, count(*) AS found FROM keyed GROUP BY lane) f ON f.lane = v.lane
    LEFT JOIN (SELECT lane, count(*) AS taken, max(walk_step) AS last FROM picked WHERE walk_step IS NOT NULL GROUP BY lane) p
      ON p.lane = v.lane
  ) e
  JOIN walk w ON w.lane = e.lane AND w.step = e.step
  WHERE e.lane IN (SELECT lane FROM held) OR e.lane IN (SELECT lane FROM recorded)
),
handed_back AS (
  UPDATE /*schema*/relaybus_lanes l
  SET lease_owner = NULL, lease_expires_at = NULL, in_flight = '{}'
  -- The lane's finished ids joined once: as a subquery in the anti-join's filter it ran again for every in-flight row
  -- (a fifth of a claim that completed 5,000 deliveries with followers).
  FROM seen h LEFT JOIN finished x ON x.lane = h.lane
  -- h.in_flight, not l.in_flight: h is the locked row, while an anti-join on l would be re-checked against the row
  -- version of this statement's snapshot (EvalPlanQual keeps the first join result).
  WHERE l.lane = h.lane AND l.lease_owner = $1
    AND l.lane NOT IN (SELECT lane FROM grouped)
    -- Nothing left in flight: as many ids listed as completed now means every listed id was (each completed one is a
    -- listed one, once: no lookup needed), else each listed one not completed now is gone (a transactional completion).
    AND (cardinality(h.in_flight) = coalesce(cardinality(x.ids), 0)
      OR NOT EXISTS (
        SELECT 1 FROM /*schema*/relaybus_deliveries d
        WHERE d.id = ANY (h.in_flight) AND d.id <> ALL (coalesce(x.ids, '{}'))))
  RETURNING l.lane
),
summary AS MATERIALIZED (
  -- Materialized: inlined, each of these subqueries was planned twice (select list and WHERE below), and a statement
  -- this size spends more time initialising its plan's nodes than running them under a light load.
  SELECT (SELECT count(*) FROM deleted) AS completed,
         ((SELECT count(*) FROM held) + (SELECT count(*) FROM named) - (SELECT count(*) FROM seen))::int AS lanes,
         ARRAY(SELECT h.lane::text FROM handed_back h) AS handed_back,
         (SELECT count(*) FROM /*schema*/relaybus_lanes p
          WHERE p.lease_owner <> $1 AND p.lease_owner <> ALL ($20::text[])
            AND p.lease_expires_at > coalesce($5::timestamptz, now()))::int AS peer_lanes,
         ARRAY(SELECT t.v FROM walk_end w CROSS JOIN LATERAL (VALUES (1, w.lane::text), (2, w.handler), (3, w.key)) AS t(ord, v)
               ORDER BY w.lane, t.ord) AS walk_ends
)
-- One row: the claimed deliveries as one JSON value (sql/fragments/claimed-rows.sql), then the summary. Not a row per
-- completed delivery either: a row per id cost the client more than the rest of a delivery's parsing.
SELECT /*include claimed-rows*/ AS claimed, ARRAY(SELECT r.lane || ':' || r.epoch FROM recorded r) AS lane_epochs,
       CASE WHEN k.completed = cardinality($9::bigint[]) THEN NULL ELSE ARRAY(SELECT c.id::text FROM deleted c) END
         AS completed_ids,
       k.lanes AS skipped_lanes, k.handed_back, k.walk_ends, k.peer_lanes, /*include replay-clock*/ AS replay_clock
FROM summary k
