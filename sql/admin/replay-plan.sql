-- replay-plan: what replay-start would plan (the dry run, store.planReplay): per handler asked for, the deliveries it
--              would create, and the events the filter selects; which named types it does not subscribe to. Writes
--              nothing.
-- index: relaybus_subscriptions_pkey; relaybus_events (a scan of the kept events: a dry run reads them all once)
-- params: $1 mode text ('backfill' | 'redrive'), $2 handlers text[], $3 event types text[] (null: each handler's
--         subscribed types), $4 since timestamptz, $5 until timestamptz, $6 from event id text, $7 to event id text,
--         $8 key text (each null: no bound); see sql/fragments/replay-selection.sql
-- returns: one row per handler of $2, in its order: handler, deliveries, events (the same on every row), unsubscribed
--          (the types of $3 it has no active subscription to)
WITH /*include replay-selection*/,
counted AS (
  SELECT p.handler, count(*) AS deliveries FROM replay_pairs p GROUP BY p.handler
)
SELECT h.handler, coalesce(c.deliveries, 0)::int AS deliveries, (SELECT count(*) FROM replay_events)::int AS events,
       ARRAY(SELECT t FROM unnest($3::text[]) AS t
             WHERE NOT EXISTS (SELECT 1 FROM replay_subscriptions s WHERE s.handler = h.handler AND s.event_type = t))
         AS unsubscribed
FROM unnest($2::text[]) WITH ORDINALITY AS h(handler, ord)
LEFT JOIN counted c ON c.handler = h.handler
ORDER BY h.ord
