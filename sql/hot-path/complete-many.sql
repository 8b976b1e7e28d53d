-- complete-many: delete a batch of completed deliveries whose claim is still held (fenced), in one statement; with
--                $5, a completion-history row per deleted delivery. For a keyed one, whether its key's next delivery is
--                due now (its new head: a claim would pick it), so a dispatcher claims again only when that pays.
-- index: relaybus_deliveries_pkey (driven from the ids); relaybus_lanes_pkey (the fence is a per-row subquery, never
--        a join driven from lanes: that plan scanned whole lanes at a deep backlog); relaybus_events_pkey (history);
--        relaybus_deliveries_lane_handler_key_sequence_idx (a keyed delivery's next, one descent)
-- params: $1 delivery ids bigint[], $2 lanes smallint[], $3 epochs bigint[], $4 claims int[], $5 completion history
--         boolean, $6 now timestamptz (null = now(); the history rows' completed_at)
-- returns: id of every deleted delivery (absent ids = lease lost), and next_due: its key's next pending delivery is
--          due (false when unkeyed, or none is)
-- commit: asynchronous (synchronous_commit off for this statement's own transaction): a crash of the server may lose
--         it, which only means a redelivery (at-least-once), never a lost delivery; see docs/guide/guarantees.md.
WITH deleted AS (
  DELETE FROM /*schema*/relaybus_deliveries d
  USING unnest($1::bigint[], $2::smallint[], $3::bigint[], $4::int[]) AS t(id, lane, epoch, claims)
  WHERE d.id = t.id AND d.lane = t.lane AND d.claims = t.claims AND d.status = 'pending'
    AND EXISTS (
      SELECT 1 FROM /*schema*/relaybus_lanes l
      WHERE l.lane = t.lane AND l.epoch = t.epoch AND t.id = ANY (l.in_flight))
    AND (SELECT set_config('synchronous_commit', 'off', true)) IS NOT NULL
  RETURNING d.id, d.event_id, d.event_type, d.handler, d.lane, d.key, d.sequence, d.attempts, d.max_attempts, d.created_at
),
history_params AS (
  SELECT $5::boolean AS enabled, coalesce($6::timestamptz, now()) AS completed_at
),
/*include completion-history*/
SELECT c.id::text AS id,
       coalesce(c.key IS NOT NULL AND (
         SELECT n.available_at <= (SELECT completed_at FROM history_params)
         FROM /*schema*/relaybus_deliveries n
         WHERE n.lane = c.lane AND n.handler = c.handler AND n.key = c.key AND n.sequence > c.sequence
           AND n.key IS NOT NULL AND n.status = 'pending'
         ORDER BY n.handler, n.key, n.sequence
         LIMIT 1), false) AS next_due
FROM deleted c
