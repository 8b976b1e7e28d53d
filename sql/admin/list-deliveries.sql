-- list-deliveries: one page of deliveries (and completion history) for admin views, ordered by id.
-- index: relaybus_deliveries_pkey (id > cursor); relaybus_events_pkey; relaybus_lanes_pkey. Filters are scans: an
--        admin path (no index of its own, so the hot path pays nothing for it)
-- params: $1 status text (null = any; 'processing' = pending and in flight), $2 handler text, $3 event id text,
--         $4 key text, $5 after id bigint (cursor), $6 limit int, $7 with payload bool (false: payload and headers
--         are null and never read, so a long listing does not detoast payloads)
-- returns: up to $6 rows: the delivery with its computed status, and with $7 its event's payload and headers (from the
--          delivery itself for an event published inline; null when no row holds them any more)
SELECT * FROM (
  SELECT d.id::text AS id, d.event_id, coalesce(d.event_type, e.type) AS event_type, d.handler, d.key, d.sequence::text AS sequence, d.lane,
         CASE WHEN d.status = 'pending' AND d.id = ANY (l.in_flight) THEN 'processing' ELSE d.status END AS status,
         d.attempts, d.max_attempts, d.available_at, d.last_error, d.created_at, d.updated_at,
         CASE WHEN $7::bool THEN coalesce(d.payload, e.payload) END AS payload,
         CASE WHEN $7::bool THEN coalesce(d.headers, e.headers) END AS headers,
         d.id AS sort_id
  FROM /*schema*/relaybus_deliveries d
  -- No events row for an event published inline: its deliveries carry its type, payload and headers.
  LEFT JOIN /*schema*/relaybus_events e ON e.id = d.event_id AND d.event_type IS NULL
  JOIN /*schema*/relaybus_lanes l ON l.lane = d.lane
  WHERE ($2::text IS NULL OR d.handler = $2::text)
    AND ($3::text IS NULL OR d.event_id = $3::text)
    AND ($4::text IS NULL OR d.key = $4::text)
    AND ($5::bigint IS NULL OR d.id > $5::bigint)
  UNION ALL
  SELECT h.delivery_id::text, h.event_id, h.event_type, h.handler, h.key, h.sequence::text, h.lane, 'completed',
         h.attempts, h.max_attempts, h.completed_at, NULL, h.created_at, h.completed_at,
         e.payload, e.headers, h.delivery_id
  FROM /*schema*/relaybus_completed_deliveries h
  LEFT JOIN /*schema*/relaybus_events e ON $7::bool AND e.id = h.event_id
  WHERE ($1::text IS NULL OR $1::text = 'completed')
    AND ($2::text IS NULL OR h.handler = $2::text)
    AND ($3::text IS NULL OR h.event_id = $3::text)
    AND ($4::text IS NULL OR h.key = $4::text)
    AND ($5::bigint IS NULL OR h.delivery_id > $5::bigint)
) x
WHERE $1::text IS NULL OR x.status = $1::text
ORDER BY x.sort_id
LIMIT $6::int
