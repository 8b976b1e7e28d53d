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
keyed AS (
  SELECT id AS pos, key FROM targets WHERE key IS NOT NULL
),
/*include key-order*/
UPDATE /*schema*/relaybus_deliveries d
SET status = 'pending', attempts = 0, claims = d.claims + 1,
    available_at = coalesce($4::timestamptz, now()), updated_at = coalesce($4::timestamptz, now()),
    sequence = coalesce(n.sequence, d.sequence)
FROM targets t LEFT JOIN numbered n ON n.pos = t.id
WHERE d.id = t.id
RETURNING d.id::text AS id
