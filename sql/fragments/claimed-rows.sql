-- fragment claimed-rows: the claimed deliveries of claim-held-lanes and claim-light (spliced in where they say
--          /*include claimed-rows*/), as one JSON text: an array with one array per picked delivery, in picked's order
--          (claim-light: oldest due first; claim-held-lanes: its heads by rank and due time, then their followers),
--          holding in turn id, lane, claims, [event id, event type, handler, key], sequence, payload, headers,
--          attempts, max attempts, available_at and created_at (whole milliseconds since the epoch), early (claimed
--          before it was due) and after (the id of the delivery of this claim that must succeed before this one
--          starts: a follower of its key's head; else null). NULL when nothing was picked.
--          One value instead of a row per delivery: the client parses it with one JSON.parse, where a row per delivery
--          cost it a string and a parse per column (much of the dispatcher's time to receive a claim). The
--          event's type, payload and headers come from its events row when it has one. The statement defines picked and
--          $5.
--          Written out as text (concat_ws of each value's text, string_agg of the rows) rather than json_agg of
--          json_build_array, which looks up every argument's type for every row (measure changes here with
--          bench:claim-compare --ids and CLAIM_FOLLOWERS=9, the state of a keyed drain; see bench/README.md).
--          concat_ws skips a NULL, which would shift every later value: each value that may be NULL is written 'null'
--          instead (the client checks each tuple's length). Not sorted here: sorting the rows' text is a visible part
--          of a large claim, and picked's order is the one wanted (no ORDER BY can keep it for less; the dispatcher
--          only launches heads in that order).
--          The epoch each lane was recorded under is not in the rows: the statement returns it once per lane
--          (lane_epochs), and the client reads a row of a lane not listed there as not claimed (none is: every picked
--          lane's row is locked and unchanged since the snapshot); looked up for each row, it cost the claim more.
(SELECT '[' || string_agg(concat_ws(',',
          -- Ids and sequences are digits: quoted as they are. Text a user chose is escaped by array_to_json.
          '["' || p.id || '"', p.lane, p.claims,
          -- One array of the four: array_to_json looks up the element type once, to_json once per value.
          array_to_json(ARRAY[p.event_id, coalesce(e.type, p.event_type), p.handler, p.key]),
          coalesce('"' || p.sequence || '"', 'null'), coalesce(coalesce(e.payload, p.payload)::text, 'null'),
          coalesce(coalesce(e.headers, p.headers)::text, 'null'), p.attempts, p.max_attempts,
          -- Milliseconds since the epoch, to the nearest (the client reads a number, not a timestamp's text). In double
          -- precision: exact to well under a microsecond for any date a delivery has, and a quarter of the cost of the
          -- exact truncation (round(date_part(date_trunc('milliseconds', ...)) * 1000), 1.9 us a row at 5,000 rows).
          (date_part('epoch', p.available_at) * 1000)::int8,
          (date_part('epoch', p.created_at) * 1000)::int8,
          CASE WHEN p.available_at > coalesce($5::timestamptz, now()) THEN 'true' ELSE 'false' END,
          coalesce('"' || p.after || '"', 'null') || ']'), ',') || ']'
FROM picked p
-- An event published inline (its delivery carries its type) has no events row: not even looked up. Behind OFFSET 0
-- the condition is the subquery's one-time filter, checked before the index scan (as a join condition it would only
-- filter what the scan found: a probe per delivery for nothing).
LEFT JOIN LATERAL (
  SELECT e.type, e.payload, e.headers FROM /*schema*/relaybus_events e
  WHERE p.event_type IS NULL AND e.id = p.event_id OFFSET 0
) e ON true)
