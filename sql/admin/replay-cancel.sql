-- replay-cancel: stop a running replay: cancelled (its hold ends at once), its items not taken deleted; the deliveries
--                it created stay. A replay not running is left as it is.
-- index: relaybus_replays_pkey; relaybus_replay_items_pkey (the replay's items)
-- params: $1 replay id bigint, $2 now timestamptz (null = now())
-- returns: the id when it was cancelled now; no row otherwise
WITH cancelled AS (
  UPDATE /*schema*/relaybus_replays r SET state = 'cancelled', updated_at = coalesce($2::timestamptz, now())
  WHERE r.id = $1::bigint AND r.state = 'running'
  RETURNING r.id
),
dropped AS (
  DELETE FROM /*schema*/relaybus_replay_items i WHERE i.replay_id IN (SELECT id FROM cancelled)
)
SELECT id::text AS id FROM cancelled
