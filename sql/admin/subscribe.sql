-- subscribe: record that workers run these handlers (upsert by event type and handler): active again, the attempt
--            budget and retry description as the worker has them, seen_at = now (unless $6 is false: a deploy step
--            records them, and seen_at stays as it was, null when new). Rows are taken in key order, so two
--            workers subscribing the same handlers at once never wait on each other in a circle.
-- index: relaybus_subscriptions_pkey
-- params: $1 event types text[], $2 handlers text[], $3 max_attempts int[], $4 retry descriptions text[] (JSON or
--         null), $5 now timestamptz (null = now()), $6 seen boolean
-- returns: nothing
INSERT INTO /*schema*/relaybus_subscriptions AS s
  (event_type, handler, max_attempts, retry, active, created_at, updated_at, seen_at)
SELECT u.event_type, u.handler, u.max_attempts, u.retry::jsonb, true,
       coalesce($5::timestamptz, now()), coalesce($5::timestamptz, now()),
       CASE WHEN $6::boolean THEN coalesce($5::timestamptz, now()) END
FROM unnest($1::text[], $2::text[], $3::int[], $4::text[]) AS u(event_type, handler, max_attempts, retry)
ORDER BY u.event_type, u.handler
ON CONFLICT (event_type, handler) DO UPDATE
SET max_attempts = excluded.max_attempts, retry = excluded.retry, active = true,
    seen_at = CASE WHEN $6::boolean THEN excluded.seen_at ELSE s.seen_at END,
    updated_at = CASE
      WHEN (s.max_attempts, s.retry, s.active) IS DISTINCT FROM (excluded.max_attempts, excluded.retry, true)
      THEN excluded.updated_at ELSE s.updated_at END
