-- fragment replay-selection: the CTEs replay_subscriptions, replay_events and replay_pairs of the statements that plan
--          a replay (replay-plan, replay-start, replay-late-plan; spliced in where they say /*include replay-selection*/):
--          the active subscriptions of the handlers ($2) to the types asked for ($3; null: every type they subscribe
--          to), the kept events of those types the filter selects ($4-$8), and one pair per (event, handler) to create:
--          backfill ($1), the handler is not in the event's handlers (it never had a delivery of it); redrive, it is,
--          and it has no delivery of the event now (pending or dead). Each pair carries its delivery's sequence: the
--          event's recorded key-order value, or for a keyed event published before that was recorded, the
--          microseconds of its created_at less 2^62 (below every recorded value, in publish time); null when unkeyed.
--          Event ids compare in the id column's collation.
replay_subscriptions AS (
  SELECT s.event_type, s.handler, s.max_attempts FROM /*schema*/relaybus_subscriptions s
  WHERE s.active AND s.handler = ANY ($2::text[]) AND ($3::text[] IS NULL OR s.event_type = ANY ($3::text[]))
),
replay_events AS (
  SELECT e.id, e.type, e.key, e.handlers, e.created_at,
         CASE WHEN e.key IS NOT NULL
           THEN coalesce(e.sequence, floor(extract(epoch FROM e.created_at) * 1000000)::bigint - 4611686018427387904)
         END AS sequence
  FROM /*schema*/relaybus_events e
  WHERE e.type IN (SELECT event_type FROM replay_subscriptions)
    AND ($4::timestamptz IS NULL OR e.created_at >= $4::timestamptz)
    AND ($5::timestamptz IS NULL OR e.created_at < $5::timestamptz)
    AND ($6::text IS NULL OR e.id >= $6::text)
    AND ($7::text IS NULL OR e.id <= $7::text)
    AND ($8::text IS NULL OR e.key = $8::text)
),
replay_pairs AS (
  SELECT e.id AS event_id, e.sequence, e.created_at, s.handler, s.max_attempts
  FROM replay_events e JOIN replay_subscriptions s ON s.event_type = e.type
  WHERE CASE WHEN $1::text = 'backfill' THEN s.handler <> ALL (e.handlers)
        ELSE s.handler = ANY (e.handlers)
          AND NOT EXISTS (SELECT 1 FROM /*schema*/relaybus_deliveries d WHERE d.event_id = e.id AND d.handler = s.handler)
        END
)
