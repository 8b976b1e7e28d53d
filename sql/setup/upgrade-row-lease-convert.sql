-- upgrade-row-lease-convert: 0.1 upgrade, one batch of the conversion, in id order: each delivery not converted yet
--                            gets its lane (relaybus_lane of its key, or of its event id), its handler is added to
--                            its event's handlers (completed ones too, so nothing completed under 0.1 runs again), and
--                            a completed one moves to the completion history, where it stays listed and counted until
--                            retention purges it. A converted row is never written again, so a batch interrupted
--                            halfway is simply done again.
-- index: relaybus_deliveries_pkey (the batch: the ids after $1, in order; or with $1 null, every row still to convert);
--        relaybus_events_pkey (handlers, event type); relaybus_completed_deliveries_pkey
-- params: $1 after id bigint (null = every delivery still to convert, in one go: the final step's catch-up),
--         $2 limit int (null = no limit)
-- returns: one row: last_id (highest id read, null when the batch was empty), scanned, laned (lanes set), moved
--          (completed deliveries moved to the history), events (events whose handlers grew)
WITH batch AS (
  SELECT d.id, d.event_id, d.handler, d.key, d.status, d.lane
  FROM /*schema*/relaybus_deliveries d
  WHERE d.id > coalesce($1::bigint, -1)
    AND ($1::bigint IS NOT NULL OR d.lane IS NULL OR d.status = 'completed')
  ORDER BY d.id
  LIMIT $2::int
),
work AS (
  -- The lane once per key (or event id) of the batch: every delivery of a key shares it. (A window, not a join of two
  -- CTEs: the planner misjudges CTE sizes and nested-loops such joins.)
  SELECT f.id, f.event_id, f.handler, f.status, max(f.first_lane) OVER (PARTITION BY f.source) AS new_lane
  FROM (
    SELECT b.*, coalesce(b.key, b.event_id) AS source,
           CASE WHEN row_number() OVER (PARTITION BY coalesce(b.key, b.event_id)) = 1
                THEN /*schema*/relaybus_lane(coalesce(b.key, b.event_id)) END AS first_lane
    FROM batch b WHERE b.lane IS NULL OR b.status = 'completed'
  ) f
),
laned AS (
  UPDATE /*schema*/relaybus_deliveries d SET lane = w.new_lane
  FROM work w
  WHERE d.id = w.id AND w.status <> 'completed' AND d.lane IS NULL
  RETURNING d.id
),
moved AS (
  -- Returns what the history needs, so no step joins two of these CTEs.
  DELETE FROM /*schema*/relaybus_deliveries d
  USING work w
  WHERE d.id = w.id AND w.status = 'completed' AND d.status = 'completed'
  RETURNING d.id, d.event_id, d.handler, w.new_lane, d.key, d.sequence, d.attempts, d.max_attempts, d.created_at,
            coalesce(d.completed_at, d.updated_at) AS completed_at
),
history AS (
  INSERT INTO /*schema*/relaybus_completed_deliveries
    (delivery_id, event_id, event_type, handler, lane, key, sequence, attempts, max_attempts, created_at, completed_at)
  SELECT m.id, m.event_id, e.type, m.handler, m.new_lane, m.key, m.sequence, m.attempts, m.max_attempts, m.created_at,
         m.completed_at
  FROM moved m JOIN /*schema*/relaybus_events e ON e.id = m.event_id
  ON CONFLICT (delivery_id) DO NOTHING
  RETURNING delivery_id
),
handled AS (
  UPDATE /*schema*/relaybus_events e
  SET handlers = ARRAY(SELECT DISTINCT h FROM unnest(coalesce(e.handlers, '{}') || g.handlers) AS h ORDER BY h)
  FROM (SELECT w.event_id, array_agg(DISTINCT w.handler) AS handlers FROM work w GROUP BY w.event_id) g
  WHERE e.id = g.event_id AND (e.handlers IS NULL OR NOT e.handlers @> g.handlers)
  RETURNING e.id
)
SELECT (SELECT max(b.id) FROM batch b)::text AS last_id,
       (SELECT count(*) FROM batch)::int AS scanned,
       (SELECT count(*) FROM laned)::int AS laned,
       (SELECT count(*) FROM history)::int AS moved,
       (SELECT count(*) FROM handled)::int AS events
