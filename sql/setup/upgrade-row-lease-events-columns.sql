-- upgrade-row-lease-events-columns: 0.1 upgrade, first step: events get handlers (every handler the event ever had a
--                                   delivery for), null until the conversion fills it. Idempotent.
-- index: none
-- params: none
-- returns: nothing
ALTER TABLE /*schema*/relaybus_events ADD COLUMN IF NOT EXISTS handlers text[]
