-- fragment publish-input: the CTEs input, local and fanout of publish-new and publish (spliced in where a statement
--          says /*include publish-input*/): the events of a batch from typed arrays ($1-$7), the publishing process's
--          handlers ($8-$10), and the fan-out: those handlers, then the active subscriptions of each event's type
--          that the process does not register itself.
input AS (
  -- Payloads and headers come as JSON text (every driver passes a text[] alike), parsed here once.
  SELECT u.id, u.type, u.key, u.payload::jsonb AS payload, u.headers::jsonb AS headers, u.lane, u.available_at, u.ord
  FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::smallint[], $7::timestamptz[])
    WITH ORDINALITY AS u(id, type, key, payload, headers, lane, available_at, ord)
),
local AS (
  SELECT * FROM unnest($8::int[], $9::text[], $10::int[]) AS l(ord, handler, max_attempts)
),
fanout AS (
  -- The process's own registration wins for the handlers it runs; the subscriptions add the ones it does not.
  SELECT l.ord, l.handler, l.max_attempts FROM local l
  UNION ALL
  SELECT i.ord, s.handler, s.max_attempts
  FROM input i JOIN /*schema*/relaybus_subscriptions s ON s.event_type = i.type AND s.active
  WHERE NOT EXISTS (SELECT 1 FROM local l WHERE l.ord = i.ord AND l.handler = s.handler)
)
