-- replay-late-plan: after a replay's planned items are taken, its deliveries done and every transaction running at its
--                   start ended: with $9 (backfill), plan once more the selected events that still lack a handler
--                   (a publish that began before the handler's subscription and committed late), at positions after
--                   the last planned, and add them to its total; when there are none (or without $9: redrive), the
--                   replay is finished (its hold ends).
-- index: relaybus_subscriptions_pkey; relaybus_events (the selection, read once); relaybus_replays_pkey
-- params: $1-$8 as replay-plan (mode, handlers, types, since, until, from id, to id, key), $9 look boolean,
--         $10 replay id bigint, $11 now timestamptz (null = now())
-- returns: one row: planned (items added), finished
WITH /*include replay-selection*/,
ordered AS (
  SELECT p.event_id, p.sequence, p.handler, p.max_attempts,
         dense_rank() OVER (ORDER BY p.sequence NULLS LAST, p.created_at, p.event_id) AS position
  FROM replay_pairs p WHERE $9::boolean
),
planned AS (
  INSERT INTO /*schema*/relaybus_replay_items (replay_id, position, handler, event_id, sequence, max_attempts)
  SELECT $10::bigint, r.planned + o.position, o.handler, o.event_id, o.sequence, o.max_attempts
  FROM /*schema*/relaybus_replays r CROSS JOIN ordered o
  WHERE r.id = $10::bigint
  RETURNING 1
),
updated AS (
  UPDATE /*schema*/relaybus_replays r
  SET total = r.total + (SELECT count(*) FROM ordered),
      planned = r.planned + coalesce((SELECT max(position) FROM ordered), 0),
      state = CASE WHEN EXISTS (SELECT 1 FROM ordered) THEN r.state ELSE 'finished' END,
      finished_at = CASE WHEN EXISTS (SELECT 1 FROM ordered) THEN r.finished_at ELSE coalesce($11::timestamptz, now()) END,
      updated_at = coalesce($11::timestamptz, now())
  WHERE r.id = $10::bigint
  RETURNING r.state
)
SELECT (SELECT count(*) FROM planned)::int AS planned, (SELECT state FROM updated) = 'finished' AS finished
