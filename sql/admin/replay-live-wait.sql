-- replay-live-wait: how long live traffic has waited beside a replay: per handler (but the replay's), the longest one
--                   of its deliveries has been due without starting (ms), among the newest deliveries.
--                   What runReplay's yield reads to slow a replay down while it holds live traffic up. Only the last
--                   $2 ids of the deliveries' sequence are looked at (a range of the primary key), never a scan: when
--                   the workers fall behind, the newest deliveries wait too. Left out: the replay's own handlers (their
--                   live keyed deliveries wait for history by design), paused handlers, replayed deliveries, those in
--                   flight (in a lane's in_flight) and those scheduled later.
-- index: relaybus_deliveries_pkey (the id range); relaybus_lanes_pkey (in flight?); relaybus_replays_pkey
-- params: $1 replay id bigint, $2 ids to look at int, $3 now timestamptz (null = the clock now: the step's transaction
--         began before its other statements, and a publish committed meanwhile is not due before its start)
-- returns: a row per handler with a delivery waiting (the longest first, at most 16): handler, waited_ms (float8)
WITH clock AS MATERIALIZED (
  SELECT coalesce($3::timestamptz, clock_timestamp()) AS now,
         (SELECT s.last_value FROM /*schema*/relaybus_deliveries_id_seq s) - $2::int AS after_id,
         coalesce((SELECT r.handlers FROM /*schema*/relaybus_replays r WHERE r.id = $1::bigint), '{}')
           || ARRAY(SELECT p.handler FROM /*schema*/relaybus_paused_handlers p) AS left_out
),
waiting AS (
  SELECT d.handler, max((SELECT now FROM clock) - d.available_at) AS waited
  FROM /*schema*/relaybus_deliveries d
  WHERE d.id > (SELECT after_id FROM clock) AND d.replay_id IS NULL AND d.status = 'pending'
    AND d.available_at <= (SELECT now FROM clock) AND d.handler <> ALL ((SELECT left_out FROM clock)::text[])
    AND NOT EXISTS (SELECT 1 FROM /*schema*/relaybus_lanes l WHERE l.lane = d.lane AND d.id = ANY (l.in_flight))
  GROUP BY d.handler
)
SELECT w.handler, (extract(epoch FROM w.waited) * 1000)::float8 AS waited_ms
FROM waiting w
ORDER BY w.waited DESC, w.handler
LIMIT 16
