-- cancel: withdraw the pending deliveries of an event (of one handler, or of all) that no worker runs: a scheduled
--         event, or a delivery waiting for its turn or for a retry. Fenced against a claim at the same moment: the
--         lanes of the pending deliveries are locked first, in lane order as every claim locks them, and the locked
--         row is the latest version, so a delivery a claim recorded in flight meanwhile is listed there and left
--         alone (outcome running); either it runs or it is cancelled, never both. Each lane a delivery was cancelled
--         in is rewritten, so a claim that read the deliveries before this commit and waited for the lane skips the
--         lane (its row changed since that claim's snapshot: claim-held-lanes and claim-light, seen). A cancelled
--         delivery is deleted, as a completion deletes it: the event's row keeps the handler in `handlers`, so
--         publishing the same id again does not bring it back. Dead deliveries are left alone (requeue or purge them).
-- index: a scan of the deliveries for the event id (an admin path: no index of its own, so the hot path pays nothing
--        for it); relaybus_lanes_pkey (the lanes locked); relaybus_events_pkey (the handlers the event had)
-- params: $1 event id text, $2 handler text (null = every handler)
-- returns: a row per delivery of the event (of $2), by id: id, handler, outcome (cancelled; running: in flight in its
--          lane, left alone; dead: a dead letter, left alone); then a row per handler the event had and has no delivery
--          of any more, in the event's order: id NULL, outcome finished (it completed, or was cancelled before). No
--          row: no such event.
WITH targets AS (
  SELECT d.id, d.handler, d.lane, d.status FROM /*schema*/relaybus_deliveries d
  WHERE d.event_id = $1::text AND ($2::text IS NULL OR d.handler = $2::text)
),
lanes AS (
  SELECT l.lane, l.in_flight FROM /*schema*/relaybus_lanes l
  WHERE l.lane IN (SELECT t.lane FROM targets t WHERE t.status = 'pending')
  ORDER BY l.lane
  FOR NO KEY UPDATE
),
cancelled AS (
  DELETE FROM /*schema*/relaybus_deliveries d
  USING targets t JOIN lanes l ON l.lane = t.lane
  WHERE d.id = t.id AND t.status = 'pending' AND d.status = 'pending' AND t.id <> ALL (l.in_flight)
  RETURNING d.id, d.lane
),
touched AS (
  -- Runs though nothing reads it (a data-modifying CTE always does).
  UPDATE /*schema*/relaybus_lanes l SET in_flight = l.in_flight
  WHERE l.lane IN (SELECT c.lane FROM cancelled c)
  RETURNING l.lane
)
SELECT r.id::text AS id, r.handler, r.outcome
FROM (
  SELECT t.id, t.handler, NULL::bigint AS position,
         CASE WHEN c.id IS NOT NULL THEN 'cancelled' WHEN t.status = 'dead' THEN 'dead' ELSE 'running' END AS outcome
  FROM targets t LEFT JOIN cancelled c ON c.id = t.id
  UNION ALL
  SELECT NULL, h.handler, h.position, 'finished'
  FROM /*schema*/relaybus_events e CROSS JOIN LATERAL unnest(e.handlers) WITH ORDINALITY AS h(handler, position)
  WHERE e.id = $1::text AND ($2::text IS NULL OR h.handler = $2::text)
    AND h.handler NOT IN (SELECT t.handler FROM targets t)
) r
ORDER BY r.id NULLS LAST, r.position
