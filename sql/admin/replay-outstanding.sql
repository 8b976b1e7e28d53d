-- replay-outstanding: how many of a replay's deliveries are still pending (not dead): what a throttle keeps bounded
--                     and what the late look waits for. Counted through the primary key from its first delivery on
--                     (ids of later deliveries only), never a scan of every delivery.
-- index: relaybus_replays_pkey; relaybus_deliveries_pkey (the range from first_delivery_id)
-- params: $1 replay id bigint
-- returns: one row: outstanding
SELECT count(*)::int AS outstanding
FROM /*schema*/relaybus_deliveries d
WHERE d.id >= (SELECT r.first_delivery_id FROM /*schema*/relaybus_replays r WHERE r.id = $1::bigint)
  AND d.replay_id = $1::bigint AND d.status = 'pending'
