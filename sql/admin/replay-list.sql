-- replay-list: replays, the newest first (the audit record), or one by id.
-- index: relaybus_replays_pkey (backwards, from $1 when given)
-- params: $1 replay id bigint (null: any), $2 state text (null: any), $3 limit int
-- returns: id, mode, handlers, filter, requested_by, reason, state, created_at, updated_at, finished_at, total,
--          created, skipped
SELECT r.id::text AS id, r.mode, r.handlers, r.filter, r.requested_by, r.reason, r.state, r.created_at, r.updated_at,
       r.finished_at, r.total::text AS total, r.created::text AS created, r.skipped::text AS skipped
FROM /*schema*/relaybus_replays r
WHERE ($1::bigint IS NULL OR r.id = $1::bigint) AND ($2::text IS NULL OR r.state = $2::text)
ORDER BY r.id DESC
LIMIT $3::int
