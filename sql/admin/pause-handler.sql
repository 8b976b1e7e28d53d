-- pause-handler: pause a handler for every worker: from their next claim on, no claim statement takes its deliveries
--                (acquire-lanes, claim-held-lanes and claim-light leave them out), while publishing still creates them;
--                they wait, in key order, until resume-handler. Deliveries already in flight run to their end. A
--                handler already paused keeps its row (when and why it was paused first).
-- index: relaybus_paused_handlers_pkey
-- params: $1 handler text, $2 reason text (null = none), $3 now timestamptz (null = now())
-- returns: the handler when it was paused now; no row when it already was
INSERT INTO /*schema*/relaybus_paused_handlers (handler, paused_at, reason)
VALUES ($1::text, coalesce($3::timestamptz, now()), $2::text)
ON CONFLICT (handler) DO NOTHING
RETURNING handler
