-- publish-new: publish's common case in one pass: when no input id exists yet, insert the events and one pending
--              delivery per handler; when one does, change nothing and return the marker row (the store then runs
--              publish for the whole batch, in the same transaction). Writes nothing either when $3 is set and the
--              transaction has no matching publish-guard marker (not in a transaction block).
-- index: relaybus_events_pkey (one existence probe per id; ON CONFLICT for an id a concurrent transaction inserted
--        first: it gets nothing, as in publish); relaybus_key_sequences_pkey (the key row stays locked until commit,
--        so sequence order is commit order)
-- params: $1 events jsonb: [{ ord, id, type, key, payload, headers, handlers text[], max_attempts int[], lane,
--         available_at }] (as publish), $2 now timestamptz (null = now()),
--         $3 guard text ('on': look for publish-guard's marker; null = no check), $4 NOTIFY channel text (null = no NOTIFY)
-- returns: event_id, handler, refused of every delivery inserted, in input order and by handler within an event (an
--          event without rows was not inserted: duplicate); or one row (null, null, refused) having written nothing:
--          refused 'exists' (an input id exists) or 'no-transaction'
WITH input AS (
  SELECT * FROM jsonb_to_recordset($1::jsonb) AS i(
    ord int, id text, type text, key text, payload jsonb, headers jsonb,
    handlers text[], max_attempts int[], lane smallint, available_at timestamptz)
),
guard AS (
  SELECT $3::text IS NULL OR current_setting('relaybus.publish_guard', true) IS NOT DISTINCT FROM $3::text AS ok
),
fresh AS (
  -- A scalar probe per id (never pulled up into a join), so it stays an index probe whatever the statistics say.
  SELECT (SELECT ok FROM guard) AND count(*) = 0 AS ok FROM input i
  WHERE (SELECT true FROM /*schema*/relaybus_events e WHERE e.id = i.id)
),
inserted AS (
  INSERT INTO /*schema*/relaybus_events (id, type, key, payload, headers, handlers, created_at)
  SELECT i.id, i.type, i.key, i.payload, i.headers, i.handlers, coalesce($2::timestamptz, now())
  FROM input i
  WHERE (SELECT ok FROM fresh)
  ORDER BY i.ord
  ON CONFLICT (id) DO NOTHING
  RETURNING id
),
bumped AS (
  INSERT INTO /*schema*/relaybus_key_sequences AS s (key, last_sequence)
  SELECT i.key, count(*) FROM input i JOIN inserted x ON x.id = i.id
  WHERE i.key IS NOT NULL GROUP BY i.key ORDER BY i.key
  ON CONFLICT (key) DO UPDATE SET last_sequence = s.last_sequence + excluded.last_sequence
  RETURNING key, last_sequence
),
delivered AS (
  -- A new event id has no deliveries (the foreign key), so a plain insert. The last event of a key (input order)
  -- takes the key's new last_sequence, the one before it that minus one, ...
  INSERT INTO /*schema*/relaybus_deliveries
    (event_id, handler, lane, key, sequence, status, attempts, max_attempts, claims, available_at, created_at, updated_at)
  SELECT i.id, h.handler, i.lane, i.key, b.last_sequence + 1 - dense_rank() OVER (PARTITION BY i.key ORDER BY i.ord DESC),
         'pending', 0, h.max_attempts, 0,
         coalesce(i.available_at, $2::timestamptz, now()), coalesce($2::timestamptz, now()), coalesce($2::timestamptz, now())
  FROM input i
  JOIN inserted x ON x.id = i.id
  CROSS JOIN LATERAL unnest(i.handlers, i.max_attempts) AS h(handler, max_attempts)
  LEFT JOIN bumped b ON b.key = i.key
  ORDER BY i.ord, h.handler
  RETURNING event_id, handler
),
notified AS (
  -- Wakes the dispatchers that LISTEN ($4: the channel; null: no NOTIFY). Postgres delivers it at commit, once per
  -- transaction however many publishes notified (identical notifications are folded).
  SELECT pg_notify($4::text, '') FROM (SELECT 1 FROM delivered LIMIT 1) d WHERE $4::text IS NOT NULL
)
SELECT event_id, handler, NULL::text AS refused FROM delivered WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
SELECT NULL, NULL, CASE WHEN (SELECT ok FROM guard) THEN 'exists' ELSE 'no-transaction' END FROM fresh WHERE NOT ok
