-- analyze-events: refresh the planner's statistics of the events table (planner-statistics.sql found them stale); the
--                 claims look up each delivery's event by id, and a plan made while the table read as empty scans it.
-- index: none (samples the table)
-- params: none
-- returns: nothing
ANALYZE /*schema*/relaybus_events
