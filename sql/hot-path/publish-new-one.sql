-- publish-new-one: the request path's publish, one new event from plain parameters, in as few plan nodes as it
--                  takes: insert the event and one pending delivery per handler (the process's, then the active
--                  subscriptions of the type it does not register itself). Returns no row, having written nothing,
--                  whenever it is not that simple case: the id exists (or a concurrent transaction inserted it
--                  first), the event has no handler, or $10 is set and the transaction has no matching publish-guard
--                  marker; the store then runs publish, which tells which. A keyed event takes its key's advisory
--                  lock, held until commit, then a key-order value: per key, sequence order is commit order.
--                  With $13 (an id the store generated, a small payload, no completion history) no events row is
--                  written: the deliveries carry the event's type, payload and headers (nothing can publish that id
--                  again to be deduplicated against it, and nothing keeps it after its deliveries).
-- index: relaybus_events_pkey (ON CONFLICT: an existing id gets nothing); relaybus_subscriptions_pkey (the fan-out)
-- params: $1 id, $2 type, $3 key (null = unkeyed), $4 payload (JSON text), $5 headers (JSON text), $6 handler names
--         text[] and $7 their max_attempts int[] (the publishing process's handlers, maybe none), $8 lane smallint,
--         $9 available_at timestamptz (null = now), $10 guard text ('on': look for publish-guard's marker; null = no
--         check), $11 now timestamptz (null = now()), $12 NOTIFY channel text (null = no NOTIFY), $13 inline boolean
--         (true: no events row, the deliveries carry the event)
-- returns: (ord 1, handlers, refused null) when inserted; no row otherwise
WITH fanout AS (
  SELECT l.handler, l.max_attempts FROM unnest($6::text[], $7::int[]) AS l(handler, max_attempts)
  UNION ALL
  SELECT s.handler, s.max_attempts FROM /*schema*/relaybus_subscriptions s
  WHERE s.event_type = $2::text AND s.active AND s.handler <> ALL ($6::text[])
),
handled AS (
  SELECT h.handlers FROM (SELECT array_agg(f.handler ORDER BY f.handler) AS handlers FROM fanout f) h
  WHERE h.handlers IS NOT NULL
    AND ($10::text IS NULL OR current_setting('relaybus.publish_guard', true) IS NOT DISTINCT FROM $10::text)
),
ordered AS (
  -- The key's lock, then its key-order value: nextval is computed for the lock's row, so after it (the lock returns
  -- void, '' as text; for a NULL key the strict lock function is not called and gives NULL: no row, no value). Taken
  -- before the events row, which records it (a backfill replays in it).
  SELECT nextval('/*schema*/relaybus_key_order') AS sequence
  FROM (SELECT pg_advisory_xact_lock('/*schema*/relaybus_events'::regclass::oid::int, hashtext($3::text))::text AS locked
        FROM handled OFFSET 0) l
  WHERE l.locked IS NOT NULL
  UNION ALL
  SELECT NULL WHERE $3::text IS NULL
),
inserted AS (
  INSERT INTO /*schema*/relaybus_events (id, type, key, payload, headers, handlers, created_at, sequence)
  SELECT $1::text, $2::text, $3::text, $4::text::jsonb, $5::text::jsonb, h.handlers, coalesce($11::timestamptz, now()),
         (SELECT o.sequence FROM ordered o)
  FROM handled h
  WHERE NOT $13::boolean
  ON CONFLICT (id) DO NOTHING
  RETURNING id, key, handlers
),
written AS (
  -- The event as its deliveries are written: inserted above, or inline (its deliveries carry it).
  SELECT x.id, x.key, x.handlers FROM inserted x
  UNION ALL
  SELECT $1::text, $3::text, h.handlers FROM handled h WHERE $13::boolean
),
delivered AS (
  INSERT INTO /*schema*/relaybus_deliveries
    (event_id, handler, lane, key, sequence, status, attempts, max_attempts, claims, available_at, created_at, updated_at,
     event_type, payload, headers)
  SELECT x.id, f.handler, $8::smallint, x.key, s.sequence, 'pending', 0, f.max_attempts, 0,
         coalesce($9::timestamptz, $11::timestamptz, now()), coalesce($11::timestamptz, now()), coalesce($11::timestamptz, now()),
         CASE WHEN $13::boolean THEN $2::text END, CASE WHEN $13::boolean THEN $4::text::jsonb END,
         CASE WHEN $13::boolean THEN $5::text::jsonb END
  FROM written x
  CROSS JOIN ordered s
  CROSS JOIN fanout f
  ORDER BY f.handler
  RETURNING 1
),
notified AS (
  -- Wakes the dispatchers that LISTEN ($12: the channel; null: no NOTIFY) at commit; the payload names the lane, so an
  -- idle worker takes that lane first.
  SELECT pg_notify($12::text, $8::text) FROM (SELECT 1 FROM delivered LIMIT 1) d WHERE $12::text IS NOT NULL
)
SELECT 1 AS ord, x.handlers, NULL::text AS refused FROM written x WHERE (SELECT count(*) FROM notified) >= 0
