-- upgrade-row-lease-rename-unique: 0.1 upgrade, first step: the 0.1 unique index on (event_id, handler) is the one
--                                  the new layout has under another name: renamed, not rebuilt. Idempotent.
-- index: relaybus_deliveries_event_handler_unique becomes relaybus_deliveries_event_id_handler_idx
-- params: none
-- returns: nothing
ALTER INDEX IF EXISTS /*schema*/relaybus_deliveries_event_handler_unique RENAME TO relaybus_deliveries_event_id_handler_idx
