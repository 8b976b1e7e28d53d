-- requeue: move dead deliveries back to pending with a fresh attempt budget; a keyed one takes a new key-order value
--          under its key's lock, as publish does (it goes to the end of the key's order, so it never overtakes or
--          overlaps a later delivery).
-- index: relaybus_deliveries_pkey (by ids) or a scan of dead rows
-- params: $1 delivery ids bigint[] (null = any), $2 handler text (null = any), $3 event id text (null = any),
--         $4 now timestamptz (null = now())
-- returns: id of every requeued delivery
WITH targets AS (
  SELECT d.id, d.key FROM /*schema*/relaybus_deliveries d
  WHERE d.status = 'dead'
    AND ($1::bigint[] IS NULL OR d.id = ANY ($1::bigint[]))
    AND ($2::text IS NULL OR d.handler = $2::text)
    AND ($3::text IS NULL OR d.event_id = $3::text)
  ORDER BY d.id
  FOR UPDATE
),
locked AS (
  -- The key's advisory lock (as publish takes it), held until commit, before its key-order value.
  SELECT count(pg_advisory_xact_lock('/*schema*/relaybus_events'::regclass::oid::int, k.hash)) AS n
  FROM (SELECT DISTINCT hashtext(key) AS hash FROM targets WHERE key IS NOT NULL ORDER BY 1) k
),
numbered AS (
  SELECT k.id, nextval('/*schema*/relaybus_key_order') AS sequence
  FROM (SELECT id FROM targets WHERE key IS NOT NULL AND (SELECT n FROM locked) >= 0 ORDER BY id) k
)
UPDATE /*schema*/relaybus_deliveries d
SET status = 'pending', attempts = 0, claims = d.claims + 1,
    available_at = coalesce($4::timestamptz, now()), updated_at = coalesce($4::timestamptz, now()),
    sequence = coalesce(n.sequence, d.sequence)
FROM targets t LEFT JOIN numbered n ON n.id = t.id
WHERE d.id = t.id
RETURNING d.id::text AS id
