-- upgrade-row-lease-events-handlers: 0.1 upgrade, final step: an event that had no delivery left (purged, or never
--                                    had a handler) gets an empty handlers list, so the column can be required.
-- index: none: a scan of events (under the final step's lock)
-- params: none
-- returns: one row: events (how many were set)
WITH emptied AS (
  UPDATE /*schema*/relaybus_events e SET handlers = '{}' WHERE e.handlers IS NULL RETURNING e.id
)
SELECT count(*)::int AS events FROM emptied
