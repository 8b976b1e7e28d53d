-- complete-one: delete one delivery inside the handler's transaction, fenced by a FOR KEY SHARE lock on its lane
--               row, which a takeover (FOR UPDATE) cannot pass until this transaction ends; with $5, a
--               completion-history row.
-- index: relaybus_lanes_pkey; relaybus_deliveries_pkey; relaybus_events_pkey (history)
-- params: $1 delivery id bigint, $2 lane smallint, $3 epoch bigint, $4 claims int, $5 completion history boolean,
--         $6 now timestamptz (null = now(); the history row's completed_at)
-- returns: the id when deleted (no row = lease lost)
WITH fence AS (
  SELECT l.lane FROM /*schema*/relaybus_lanes l
  WHERE l.lane = $2::smallint AND l.epoch = $3::bigint AND $1::bigint = ANY (l.in_flight)
  FOR KEY SHARE
),
deleted AS (
  DELETE FROM /*schema*/relaybus_deliveries d
  WHERE d.id = $1::bigint AND d.lane = $2::smallint AND d.claims = $4::int AND d.status = 'pending'
    AND EXISTS (SELECT 1 FROM fence)
  RETURNING d.id, d.event_id, d.event_type, d.handler, d.lane, d.key, d.sequence, d.attempts, d.max_attempts, d.created_at
),
history_params AS (
  SELECT $5::boolean AS enabled, coalesce($6::timestamptz, now()) AS completed_at
),
/*include completion-history*/
SELECT id::text AS id FROM deleted
