-- publish-new-one: publish-new for a single event, from plain parameters (no arrays of events to take apart, fewer
--                  plan nodes: one event per transaction is the common request path). When its id does not exist
--                  yet, insert the event and one pending delivery per handler (the process's, then the active
--                  subscriptions of the type it does not register itself); when it does, change nothing and return
--                  the marker row (the store then runs publish, in the same transaction). Writes nothing either when
--                  the event has no handler at all, or when $10 is set and the transaction has no matching
--                  publish-guard marker. A keyed event takes its key's advisory lock, held until commit, then a
--                  key-order value: per key, sequence order is commit order.
-- index: relaybus_events_pkey (the existence probe; ON CONFLICT for an id a concurrent transaction inserted first: it
--        gets nothing, as in publish); relaybus_subscriptions_pkey (the fan-out)
-- params: $1 id, $2 type, $3 key (null = unkeyed), $4 payload (JSON text), $5 headers (JSON text), $6 handler names
--         text[] and $7 their max_attempts int[] (the publishing process's handlers, maybe none), $8 lane smallint,
--         $9 available_at timestamptz (null = now), $10 guard text ('on': look for publish-guard's marker; null = no
--         check), $11 now timestamptz (null = now()), $12 NOTIFY channel text (null = no NOTIFY)
-- returns: as publish-new: (1, handlers, null) when inserted; no row when a concurrent transaction inserted the id
--          first; or (1, null, refused) having written nothing: 'exists', 'no-handlers' or 'no-transaction'
WITH fanout AS (
  SELECT l.handler, l.max_attempts FROM unnest($6::text[], $7::int[]) AS l(handler, max_attempts)
  UNION ALL
  SELECT s.handler, s.max_attempts FROM /*schema*/relaybus_subscriptions s
  WHERE s.event_type = $2::text AND s.active AND s.handler <> ALL ($6::text[])
),
refusal AS (
  SELECT CASE
    WHEN NOT ($10::text IS NULL OR current_setting('relaybus.publish_guard', true) IS NOT DISTINCT FROM $10::text) THEN 'no-transaction'
    WHEN EXISTS (SELECT 1 FROM /*schema*/relaybus_events e WHERE e.id = $1::text) THEN 'exists'
    WHEN NOT EXISTS (SELECT 1 FROM fanout) THEN 'no-handlers'
  END AS refused
),
locked AS (
  -- An aggregate without FROM: the lock is taken only when the WHERE holds.
  SELECT count(pg_advisory_xact_lock('/*schema*/relaybus_events'::regclass::oid::int, hashtext($3::text))) AS n
  WHERE $3::text IS NOT NULL AND (SELECT refused IS NULL FROM refusal)
),
inserted AS (
  INSERT INTO /*schema*/relaybus_events (id, type, key, payload, headers, handlers, created_at)
  SELECT $1::text, $2::text, $3::text, $4::text::jsonb, $5::text::jsonb,
         ARRAY(SELECT f.handler FROM fanout f ORDER BY f.handler), coalesce($11::timestamptz, now())
  WHERE (SELECT refused IS NULL FROM refusal)
  ON CONFLICT (id) DO NOTHING
  RETURNING id, key, handlers
),
delivered AS (
  INSERT INTO /*schema*/relaybus_deliveries
    (event_id, handler, lane, key, sequence, status, attempts, max_attempts, claims, available_at, created_at, updated_at)
  SELECT x.id, f.handler, $8::smallint, x.key, s.sequence, 'pending', 0, f.max_attempts, 0,
         coalesce($9::timestamptz, $11::timestamptz, now()), coalesce($11::timestamptz, now()), coalesce($11::timestamptz, now())
  FROM inserted x
  -- One key-order value for the event, taken after the lock (the CASE runs the lock's initplan first).
  CROSS JOIN (SELECT CASE WHEN $3::text IS NOT NULL AND (SELECT n FROM locked) > 0 THEN nextval('/*schema*/relaybus_key_order') END AS sequence) s
  CROSS JOIN fanout f
  ORDER BY f.handler
  RETURNING 1
),
notified AS (
  -- Wakes the dispatchers that LISTEN ($12: the channel; null: no NOTIFY), once per transaction at commit.
  SELECT pg_notify($12::text, '') FROM (SELECT 1 FROM delivered LIMIT 1) d WHERE $12::text IS NOT NULL
)
SELECT 1 AS ord, x.handlers, NULL::text AS refused FROM inserted x WHERE (SELECT count(*) FROM notified) >= 0
UNION ALL
SELECT 1, NULL, r.refused FROM refusal r WHERE r.refused IS NOT NULL
