-- replay-outstanding: how many of a replay's deliveries are still pending (not dead): what a throttle keeps bounded
--                     and what the late look waits for. Counted from the pending replayed rows only (keyed: their own
--                     index; unkeyed: the pending unkeyed rows), so a count costs what is outstanding, not every
--                     delivery created since the replay began (live traffic included), which a replay beside live
--                     traffic would read again at every step.
-- index: relaybus_deliveries_replayed_idx (keyed); relaybus_deliveries_unkeyed_due_idx (unkeyed)
-- params: $1 replay id bigint
-- returns: one row: outstanding
SELECT ((SELECT count(*) FROM /*schema*/relaybus_deliveries d
         WHERE d.replay_id = $1::bigint AND d.key IS NOT NULL AND d.status = 'pending')
      + (SELECT count(*) FROM /*schema*/relaybus_deliveries d
         WHERE d.replay_id = $1::bigint AND d.key IS NULL AND d.status = 'pending'))::int AS outstanding
