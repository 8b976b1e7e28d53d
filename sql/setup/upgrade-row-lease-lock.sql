-- upgrade-row-lease-lock: the final step of the 0.1 upgrade takes both 0.1 tables for the rest of its transaction:
--                         no 0.1 worker or publisher can write while it checks the leases and changes the layout.
-- index: none
-- params: none
-- returns: nothing
LOCK TABLE /*schema*/relaybus_deliveries, /*schema*/relaybus_events IN ACCESS EXCLUSIVE MODE
