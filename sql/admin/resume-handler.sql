-- resume-handler: resume a paused handler: the next claim of any worker takes its deliveries again, each key's in order.
-- index: relaybus_paused_handlers_pkey
-- params: $1 handler text
-- returns: the handler when it was paused; no row when it was not
DELETE FROM /*schema*/relaybus_paused_handlers WHERE handler = $1::text
RETURNING handler
