-- upgrade-row-lease-events-layout: 0.1 upgrade, final step: events as migration 0000_init creates them (handlers
--                                  required, no column defaults). Run after every event has its handlers.
-- index: none (catalog change; checks that no handlers is null)
-- params: none
-- returns: nothing
ALTER TABLE /*schema*/relaybus_events
  ALTER COLUMN handlers SET NOT NULL,
  ALTER COLUMN id DROP DEFAULT, ALTER COLUMN type DROP DEFAULT, ALTER COLUMN key DROP DEFAULT,
  ALTER COLUMN payload DROP DEFAULT, ALTER COLUMN headers DROP DEFAULT, ALTER COLUMN created_at DROP DEFAULT
