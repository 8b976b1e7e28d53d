-- publish: insert events and one pending delivery per handler they never had, in the caller's transaction (inbox
--          dedup): the handlers are the publishing process's, then the active subscriptions of the type it does not
--          register itself. An input id that exists with a different type, key or payload (jsonb equality) is a
--          conflict: then nothing at all is written and the conflicting rows say what differs. Writes nothing either
--          when an event has no handler, or when $11 is set and the transaction has no matching publish-guard marker.
--          Existing events are locked (FOR UPDATE) before their handlers are read, so two publishes of one id never
--          both add a handler, and the purge (which locks before it deletes) never removes an event gaining one.
--          A new keyed event's row records the key-order value its deliveries get (a backfill replays in it).
-- index: relaybus_events_pkey (dedup, FOR UPDATE of existing ids); relaybus_subscriptions_pkey (the fan-out)
-- params: as publish-new: $1 ids, $2 types, $3 keys, $4 payloads text[] (JSON), $5 headers text[] (JSON), $6 lanes smallint[],
--         $7 available_at timestamptz[], $8 handler event ordinals int[], $9 handler names text[], $10 handler
--         max_attempts int[], $11 guard text, $12 now timestamptz, $13 NOTIFY channel text
-- returns: one row per input event in input order: ord, id, added (handlers that got a delivery), duplicate,
--          conflict (what differs from the stored event: 'type', 'key', 'payload'; null when nothing does),
--          stored_type, stored_key (of a conflicting event), no_transaction (true: refused, nothing written),
--          no_handlers (true: this event has no handler; nothing written), raced (true: the id was not there when
--          this statement looked, and a concurrent transaction inserted it and committed first: nothing written for
--          it here; the store publishes it again, now against the committed event, and takes back the batch on a
--          conflict)
WITH /*include publish-input*/,
guard AS (
  SELECT $11::text IS NULL OR current_setting('relaybus.publish_guard', true) IS NOT DISTINCT FROM $11::text AS ok
),
unserved AS (
  SELECT i.ord FROM input i WHERE NOT EXISTS (SELECT 1 FROM fanout f WHERE f.ord = i.ord)
),
existing AS (
  SELECT e.id, e.handlers, e.type, e.key, e.payload FROM /*schema*/relaybus_events e
  WHERE e.id IN (SELECT id FROM input) AND (SELECT ok FROM guard) AND NOT EXISTS (SELECT 1 FROM unserved)
  ORDER BY e.id
  FOR UPDATE
),
conflicts AS (
  SELECT i.ord, x.type AS stored_type, x.key AS stored_key, array_remove(ARRAY[
           CASE WHEN x.type <> i.type THEN 'type' END,
           CASE WHEN x.key IS DISTINCT FROM i.key THEN 'key' END,
           CASE WHEN x.payload <> i.payload THEN 'payload' END], NULL) AS differences
  FROM existing x JOIN input i ON i.id = x.id
),
allowed AS (
  SELECT (SELECT ok FROM guard) AND NOT EXISTS (SELECT 1 FROM unserved)
     AND NOT EXISTS (SELECT 1 FROM conflicts WHERE cardinality(differences) > 0) AS ok
),
pairs AS (
  -- Every (event, handler) to deliver: all handlers of a new id, the missing ones of an existing id.
  SELECT i.ord, i.id, i.key, i.lane, i.available_at, f.handler, f.max_attempts
  FROM input i JOIN fanout f ON f.ord = i.ord
  LEFT JOIN existing x ON x.id = i.id
  WHERE (SELECT ok FROM allowed) AND (x.id IS NULL OR f.handler <> ALL (x.handlers))
),
keyed AS (
  -- Numbered before the events are inserted, which record their value: an id a concurrent transaction inserted first
  -- (raced) wastes one, harmlessly (values need not be dense).
  SELECT DISTINCT ord AS pos, key FROM pairs WHERE key IS NOT NULL
),
/*include key-order*/,
inserted AS (
  INSERT INTO /*schema*/relaybus_events (id, type, key, payload, headers, handlers, created_at, sequence)
  SELECT i.id, i.type, i.key, i.payload, i.headers,
         ARRAY(SELECT p.handler FROM pairs p WHERE p.ord = i.ord ORDER BY p.handler), coalesce($12::timestamptz, now()),
         (SELECT n.sequence FROM numbered n WHERE n.pos = i.ord)
  FROM input i
  WHERE i.id NOT IN (SELECT id FROM existing) AND (SELECT ok FROM allowed)
  ORDER BY i.ord
  ON CONFLICT (id) DO NOTHING
  RETURNING id
),
extended AS (
  UPDATE /*schema*/relaybus_events e
  SET handlers = e.handlers || ARRAY(SELECT p.handler FROM pairs p WHERE p.id = e.id ORDER BY p.handler)
  WHERE e.id IN (SELECT p.id FROM pairs p JOIN existing x ON x.id = p.id)
  RETURNING e.id
),
written AS (
  SELECT p.* FROM pairs p WHERE p.id IN (SELECT id FROM inserted) OR p.id IN (SELECT id FROM extended)
),
delivered AS (
  INSERT INTO /*schema*/relaybus_deliveries
    (event_id, handler, lane, key, sequence, status, attempts, max_attempts, claims, available_at, created_at, updated_at)
  SELECT w.id, w.handler, w.lane, w.key, n.sequence, 'pending', 0, w.max_attempts, 0,
         coalesce(w.available_at, $12::timestamptz, now()), coalesce($12::timestamptz, now()), coalesce($12::timestamptz, now())
  FROM written w LEFT JOIN numbered n ON n.pos = w.ord
  ORDER BY w.ord, w.handler
  RETURNING event_id, handler
),
added AS (
  SELECT d.event_id, array_agg(d.handler ORDER BY d.handler) AS handlers FROM delivered d GROUP BY d.event_id
),
notified AS (
  -- Wakes the dispatchers that LISTEN ($13: the channel; null: no NOTIFY) at commit (identical notifications of one
  -- transaction are folded). The payload names the batch's lanes (up to 64; empty: many), so an idle worker takes
  -- those lanes first.
  SELECT pg_notify($13::text, (
    SELECT CASE WHEN count(DISTINCT lane) <= 64 THEN string_agg(DISTINCT lane::text, ',') ELSE '' END FROM input))
  FROM (SELECT 1 FROM delivered LIMIT 1) d WHERE $13::text IS NOT NULL
)
SELECT i.ord::int AS ord, i.id, coalesce(a.handlers, '{}') AS added, i.id NOT IN (SELECT id FROM inserted) AS duplicate,
       nullif(c.differences, '{}') AS conflict, c.stored_type, c.stored_key, NOT (SELECT ok FROM guard) AS no_transaction,
       i.ord IN (SELECT ord FROM unserved) AS no_handlers,
       (SELECT ok FROM allowed) AND i.id NOT IN (SELECT id FROM inserted) AND i.id NOT IN (SELECT id FROM existing) AS raced
FROM input i LEFT JOIN added a ON a.event_id = i.id LEFT JOIN conflicts c ON c.ord = i.ord
WHERE (SELECT count(*) FROM notified) >= 0
ORDER BY i.ord
