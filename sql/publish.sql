-- publish: insert events and one pending delivery per handler they never had, in the caller's transaction (inbox
--          dedup). An input id that exists with a different type, key or payload (jsonb equality) is a conflict: then
--          nothing at all is written and the conflicting rows say what differs. Writes nothing either when $3 is set
--          and the transaction has no matching publish-guard marker (not in a transaction block).
-- index: relaybus_events_pkey (dedup, FOR UPDATE of existing ids); relaybus_key_sequences_pkey (the key row stays
--        locked until commit, so sequence order is commit order); relaybus_deliveries_event_id_handler_idx
-- params: $1 events jsonb: [{ ord, id, type, key, payload, headers, handlers text[], max_attempts int[], lane,
--         available_at }], $2 now timestamptz (null = now()), $3 guard text ('on': look for publish-guard's marker; null = no check),
--         $4 NOTIFY channel text (null = no NOTIFY)
-- returns: one row per input event in input order: ord, id, added (handlers that got a delivery), duplicate,
--          conflict (what differs from the stored event: 'type', 'key', 'payload'; null when nothing does),
--          stored_type, stored_key (of a conflicting event), no_transaction (true: refused, nothing written)
WITH input AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS i(
    ord int, id text, type text, key text, payload jsonb, headers jsonb,
    handlers text[], max_attempts int[], lane smallint, available_at timestamptz)
),
guard AS (
  SELECT $3::text IS NULL OR current_setting('relaybus.publish_guard', true) IS NOT DISTINCT FROM $3::text AS ok
),
existing AS (
  SELECT e.id, e.handlers, e.type, e.key, e.payload FROM /*schema*/relaybus_events e
  WHERE e.id IN (SELECT id FROM input) AND (SELECT ok FROM guard)
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
  SELECT (SELECT ok FROM guard) AND NOT EXISTS (SELECT 1 FROM conflicts WHERE cardinality(differences) > 0) AS ok
),
inserted AS (
  INSERT INTO /*schema*/relaybus_events (id, type, key, payload, headers, handlers, created_at)
  SELECT i.id, i.type, i.key, i.payload, i.headers, i.handlers, coalesce($2::timestamptz, now())
  FROM input i
  WHERE i.id NOT IN (SELECT id FROM existing) AND (SELECT ok FROM allowed)
  ORDER BY i.ord
  ON CONFLICT (id) DO NOTHING
  RETURNING id
),
missing AS (
  SELECT x.id, ARRAY(SELECT h FROM unnest(i.handlers) AS h WHERE h <> ALL (x.handlers)) AS added
  FROM existing x JOIN input i ON i.id = x.id
),
extended AS (
  UPDATE /*schema*/relaybus_events e
  SET handlers = e.handlers || m.added
  FROM missing m
  WHERE e.id = m.id AND cardinality(m.added) > 0 AND (SELECT ok FROM allowed)
  RETURNING e.id, m.added
),
pairs AS (
  SELECT i.ord, i.id, i.key, i.lane, i.available_at, h.handler, h.max_attempts
  FROM input i
  CROSS JOIN LATERAL unnest(i.handlers, i.max_attempts) AS h(handler, max_attempts)
  WHERE i.id IN (SELECT id FROM inserted)
     OR EXISTS (SELECT 1 FROM extended x WHERE x.id = i.id AND h.handler = ANY (x.added))
),
keyed AS (
  SELECT key, count(DISTINCT id) AS n FROM pairs WHERE key IS NOT NULL GROUP BY key
),
bumped AS (
  INSERT INTO /*schema*/relaybus_key_sequences AS s (key, last_sequence)
  SELECT key, n FROM keyed ORDER BY key
  ON CONFLICT (key) DO UPDATE SET last_sequence = s.last_sequence + excluded.last_sequence
  RETURNING key, last_sequence
),
numbered AS (
  SELECT q.id, b.last_sequence - count(*) OVER (PARTITION BY q.key) + row_number() OVER (PARTITION BY q.key ORDER BY q.ord) AS sequence
  FROM (SELECT DISTINCT ord, id, key FROM pairs WHERE key IS NOT NULL) q
  JOIN bumped b ON b.key = q.key
),
delivered AS (
  INSERT INTO /*schema*/relaybus_deliveries
    (event_id, handler, lane, key, sequence, status, attempts, max_attempts, claims, available_at, created_at, updated_at)
  SELECT p.id, p.handler, p.lane, p.key, n.sequence, 'pending', 0, p.max_attempts, 0,
         coalesce(p.available_at, $2::timestamptz, now()), coalesce($2::timestamptz, now()), coalesce($2::timestamptz, now())
  FROM pairs p LEFT JOIN numbered n ON n.id = p.id
  ORDER BY p.ord, p.handler
  ON CONFLICT (event_id, handler) DO NOTHING
  RETURNING event_id, handler
),
added AS (
  SELECT d.event_id, array_agg(d.handler ORDER BY d.handler) AS handlers FROM delivered d GROUP BY d.event_id
),
notified AS (
  -- Wakes the dispatchers that LISTEN ($4: the channel; null: no NOTIFY). Postgres delivers it at commit, once per
  -- transaction however many publishes notified (identical notifications are folded).
  SELECT pg_notify($4::text, '') FROM (SELECT 1 FROM delivered LIMIT 1) d WHERE $4::text IS NOT NULL
)
SELECT i.ord, i.id, coalesce(a.handlers, '{}') AS added, i.id NOT IN (SELECT id FROM inserted) AS duplicate,
       nullif(c.differences, '{}') AS conflict, c.stored_type, c.stored_key, NOT (SELECT ok FROM guard) AS no_transaction
FROM input i LEFT JOIN added a ON a.event_id = i.id LEFT JOIN conflicts c ON c.ord = i.ord
WHERE (SELECT count(*) FROM notified) >= 0
ORDER BY i.ord
