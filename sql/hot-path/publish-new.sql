-- publish-new: publish's common case in one pass: when no input id exists yet, insert the events and one pending
--              delivery per handler (the publishing process's handlers, then the active subscriptions of the type it
--              does not register itself); when one does, change nothing and return the marker row (the store then
--              runs publish for the whole batch, in the same transaction). Writes nothing either when an event has
--              no handler at all, or when $11 is set and the transaction has no matching publish-guard marker (not in
--              a transaction block). Keyed events take an advisory lock per key (in hash order: two batches never
--              wait on each other in a circle), held until commit, then key-order values in input order: per key,
--              sequence order is commit order; an events row records its key-order value (a backfill replays in
--              it). An event marked inline in $14 (an id the store generated, a small
--              payload, no completion history) gets no events row: its deliveries carry its type, payload and headers.
-- index: relaybus_events_pkey (one existence probe per id; ON CONFLICT for an id a concurrent transaction inserted
--        first: it gets nothing, as in publish); relaybus_subscriptions_pkey (the fan-out, by event type)
-- params: $1 ids text[], $2 types text[], $3 keys text[] (null = unkeyed), $4 payloads text[] (JSON), $5 headers text[] (JSON),
--         $6 lanes smallint[], $7 available_at timestamptz[] (null = now), $8 handler event ordinals int[] (1-based),
--         $9 handler names text[], $10 handler max_attempts int[] (the publishing process's handlers, one element per
--         (event, handler)), $11 guard text ('on': look for publish-guard's marker; null = no check),
--         $12 now timestamptz (null = now()), $13 NOTIFY channel text (null = no NOTIFY), $14 inline boolean[] (per
--         event; true: no events row, the deliveries carry the event)
-- returns: ord, handlers of every event inserted, in input order (an event without a row was not inserted: a
--          concurrent transaction inserted its id first); or one row (ord, null, refused) having written nothing:
--          refused 'exists' (an input id exists), 'no-handlers' (event ord has no handler) or 'no-transaction'
WITH /*include publish-input*/,
handler_lists AS (
  -- events.handlers, one aggregate over the fan-out (not a scan of it per event).
  SELECT f.ord, array_agg(f.handler ORDER BY f.handler) AS handlers FROM fanout f GROUP BY f.ord
),
refusal AS (
  SELECT CASE
    WHEN NOT ($11::text IS NULL OR current_setting('relaybus.publish_guard', true) IS NOT DISTINCT FROM $11::text) THEN 'no-transaction'
    WHEN EXISTS (SELECT 1 FROM input i WHERE (SELECT true FROM /*schema*/relaybus_events e WHERE e.id = i.id)) THEN 'exists'
  END AS refused,
  (SELECT min(i.ord) FROM input i WHERE NOT EXISTS (SELECT 1 FROM handler_lists h WHERE h.ord = i.ord)) AS unserved
),
fresh AS (
  SELECT refused IS NULL AND unserved IS NULL AS ok FROM refusal
),
keyed AS (
  SELECT ord AS pos, key FROM input WHERE key IS NOT NULL AND (SELECT ok FROM fresh)
),
/*include key-order*/,
inserted AS (
  INSERT INTO /*schema*/relaybus_events (id, type, key, payload, headers, handlers, created_at, sequence)
  SELECT i.id, i.type, i.key, i.payload, i.headers, h.handlers, coalesce($12::timestamptz, now()), n.sequence
  FROM input i JOIN handler_lists h ON h.ord = i.ord LEFT JOIN numbered n ON n.pos = i.ord
  WHERE (SELECT ok FROM fresh) AND NOT coalesce(($14::boolean[])[i.ord], false)
  ORDER BY i.ord
  ON CONFLICT (id) DO NOTHING
  RETURNING id, handlers
),
written AS (
  -- The events as their deliveries are written: inserted above, or inline (their deliveries carry them).
  SELECT x.id, x.handlers, false AS inline FROM inserted x
  UNION ALL
  SELECT i.id, h.handlers, true FROM input i JOIN handler_lists h ON h.ord = i.ord
  WHERE (SELECT ok FROM fresh) AND coalesce(($14::boolean[])[i.ord], false)
),
delivered AS (
  INSERT INTO /*schema*/relaybus_deliveries
    (event_id, handler, lane, key, sequence, status, attempts, max_attempts, claims, available_at, created_at, updated_at,
     event_type, payload, headers)
  SELECT i.id, f.handler, i.lane, i.key, n.sequence, 'pending', 0, f.max_attempts, 0,
         coalesce(i.available_at, $12::timestamptz, now()), coalesce($12::timestamptz, now()), coalesce($12::timestamptz, now()),
         CASE WHEN x.inline THEN i.type END, CASE WHEN x.inline THEN i.payload END, CASE WHEN x.inline THEN i.headers END
  FROM input i
  JOIN written x ON x.id = i.id
  JOIN fanout f ON f.ord = i.ord
  LEFT JOIN numbered n ON n.pos = i.ord
  ORDER BY i.ord, f.handler
  RETURNING 1
),
notified AS (
  -- Wakes the dispatchers that LISTEN ($13: the channel; null: no NOTIFY) at commit (identical notifications of one
  -- transaction are folded). The payload names the batch's lanes (up to 64; empty: many), so an idle worker takes
  -- those lanes first.
  SELECT pg_notify($13::text, (
    SELECT CASE WHEN count(DISTINCT lane) <= 64 THEN string_agg(DISTINCT lane::text, ',') ELSE '' END FROM input))
  FROM (SELECT 1 FROM delivered LIMIT 1) d WHERE $13::text IS NOT NULL
)
SELECT i.ord::int AS ord, x.handlers, NULL::text AS refused
FROM input i JOIN written x ON x.id = i.id
WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
SELECT r.unserved::int, NULL, coalesce(r.refused, 'no-handlers') FROM refusal r WHERE r.refused IS NOT NULL OR r.unserved IS NOT NULL
ORDER BY 1
