-- resume-handler: resume a paused handler: the next claim of any worker takes its deliveries again, each key's in
--                 order; the dispatchers that LISTEN are woken at commit (an empty payload: no lane named), so the
--                 deliveries that waited do not wait for the next poll.
-- index: relaybus_paused_handlers_pkey
-- params: $1 handler text, $2 NOTIFY channel text (null = no NOTIFY)
-- returns: the handler when it was paused; no row when it was not
WITH resumed AS (
  DELETE FROM /*schema*/relaybus_paused_handlers WHERE handler = $1::text
  RETURNING handler
),
notified AS (
  SELECT pg_notify($2::text, '') FROM (SELECT 1 FROM resumed LIMIT 1) r WHERE $2::text IS NOT NULL
)
SELECT r.handler FROM resumed r WHERE (SELECT count(*) FROM notified) >= 0
