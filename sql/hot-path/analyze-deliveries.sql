-- analyze-deliveries: refresh the planner's statistics of the deliveries table (planner-statistics.sql found them
--                     stale); the new statistics make every session plan the claims again, for the table as it is.
-- index: none (samples the table)
-- params: none
-- returns: nothing
ANALYZE /*schema*/relaybus_deliveries
