-- publish-new-one: publish-new for a single event, from plain parameters (no JSON document to take apart): when its
--                  id does not exist yet, insert the event and one pending delivery per handler; when it does,
--                  change nothing and return the marker row (the store then runs publish, in the same transaction).
--                  Writes nothing either when $11 is set and the transaction has no matching publish-guard marker
--                  (not in a transaction block: the caller's transaction ended, the statement would autocommit).
-- index: relaybus_events_pkey (the existence probe; ON CONFLICT for an id a concurrent transaction inserted first: it
--        gets nothing, as in publish); relaybus_key_sequences_pkey (the key row stays locked until commit, so
--        sequence order is commit order)
-- params: $1 id, $2 type, $3 key (null = unkeyed), $4 payload jsonb, $5 headers jsonb, $6 handlers text[],
--         $7 max_attempts int[] (per handler), $8 lane smallint, $9 available_at timestamptz (null = now),
--         $10 now timestamptz (null = now()), $11 guard text ('on': look for publish-guard's marker; null = no check),
--         $12 NOTIFY channel text (null = no NOTIFY)
-- returns: event_id, handler, refused: every delivery inserted, by handler (no row: not inserted, duplicate); or one
--          row (null, null, refused) having written nothing: refused 'exists' (the id exists) or 'no-transaction'
WITH guard AS (
  SELECT $11::text IS NULL OR current_setting('relaybus.publish_guard', true) IS NOT DISTINCT FROM $11::text AS ok
),
fresh AS (
  SELECT (SELECT ok FROM guard) AND NOT EXISTS (SELECT 1 FROM /*schema*/relaybus_events e WHERE e.id = $1::text) AS ok
),
inserted AS (
  INSERT INTO /*schema*/relaybus_events (id, type, key, payload, headers, handlers, created_at)
  SELECT $1::text, $2::text, $3::text, $4::jsonb, $5::jsonb, $6::text[], coalesce($10::timestamptz, now())
  WHERE (SELECT ok FROM fresh)
  ON CONFLICT (id) DO NOTHING
  RETURNING id, key
),
bumped AS (
  INSERT INTO /*schema*/relaybus_key_sequences AS s (key, last_sequence)
  SELECT key, 1 FROM inserted WHERE key IS NOT NULL
  ON CONFLICT (key) DO UPDATE SET last_sequence = s.last_sequence + 1
  RETURNING last_sequence
),
delivered AS (
  -- A new event id has no deliveries (the foreign key), so a plain insert.
  INSERT INTO /*schema*/relaybus_deliveries
    (event_id, handler, lane, key, sequence, status, attempts, max_attempts, claims, available_at, created_at, updated_at)
  SELECT x.id, h.handler, $8::smallint, x.key, (SELECT last_sequence FROM bumped), 'pending', 0, h.max_attempts, 0,
         coalesce($9::timestamptz, $10::timestamptz, now()), coalesce($10::timestamptz, now()), coalesce($10::timestamptz, now())
  FROM inserted x
  CROSS JOIN unnest($6::text[], $7::int[]) AS h(handler, max_attempts)
  ORDER BY h.handler
  RETURNING event_id, handler
),
notified AS (
  -- Wakes the dispatchers that LISTEN ($12: the channel; null: no NOTIFY). Postgres delivers it at commit, once per
  -- transaction however many publishes notified (identical notifications are folded).
  SELECT pg_notify($12::text, '') FROM (SELECT 1 FROM delivered LIMIT 1) d WHERE $12::text IS NOT NULL
)
SELECT event_id, handler, NULL::text AS refused FROM delivered WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
SELECT NULL, NULL, CASE WHEN (SELECT ok FROM guard) THEN 'exists' ELSE 'no-transaction' END FROM fresh WHERE NOT ok
