-- list-paused-handlers: the paused handlers, by name, with when and why each was paused.
-- index: a scan of relaybus_paused_handlers (a row per paused handler)
-- params: none
-- returns: handler, paused_at, reason
SELECT p.handler, p.paused_at, p.reason FROM /*schema*/relaybus_paused_handlers p ORDER BY p.handler
