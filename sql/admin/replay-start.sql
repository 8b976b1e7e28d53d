-- replay-start: start a replay, after replay-lock in the same transaction: refused (nothing written) when a handler of
--               $2 has a running replay, or a type of $3 is one a handler of $2 does not subscribe to; else record the
--               replay (running) and plan it: one item per (event, handler) of sql/fragments/replay-selection.sql, at
--               its event's position in the replay's order (ascending by the delivery's sequence, unkeyed events after
--               the keyed ones; then created_at, then id). replay-quiesce ends the transaction.
--               start_xmax: the late look waits until every transaction running now has ended (at most 30 seconds
--               after the start: see replay-take). hold_from: the first key-order value a publish after this one can
--               get (the sequence's, read as it stands: not transactional), or null when no keyed delivery of the
--               handlers is pending (no row to spare: claims then skip looking for one); see
--               sql/fragments/runnable-handlers.sql.
-- index: relaybus_replays_running_idx (running replays); relaybus_deliveries_lane_handler_key_sequence_idx (a keyed
--        delivery of the handlers pending? a pass over that index at most); relaybus_subscriptions_pkey;
--        relaybus_events (the selection, read once)
-- params: $1-$8 as replay-plan (mode, handlers, types, since, until, from id, to id, key), $9 requested_by text,
--         $10 reason text, $11 filter text (JSON, kept for the audit record), $12 now timestamptz (null = now())
-- returns: one row: id (the new replay's; null when refused), running (the id of a running replay of one of the
--          handlers: refused), unsubscribed_type and unsubscribed_handler (a named type the handler does not
--          subscribe to: refused)
WITH /*include replay-selection*/,
running AS (
  SELECT min(r.id) AS id FROM /*schema*/relaybus_replays r WHERE r.state = 'running' AND r.handlers && $2::text[]
),
unsubscribed AS (
  SELECT t.event_type, h.handler FROM unnest($3::text[]) AS t(event_type) CROSS JOIN unnest($2::text[]) AS h(handler)
  WHERE NOT EXISTS (
    SELECT 1 FROM replay_subscriptions s WHERE s.handler = h.handler AND s.event_type = t.event_type)
  LIMIT 1
),
allowed AS (
  SELECT (SELECT id FROM running) IS NULL AND NOT EXISTS (SELECT 1 FROM unsubscribed) AS ok
),
ordered AS (
  SELECT p.event_id, p.sequence, p.handler, p.max_attempts,
         dense_rank() OVER (ORDER BY p.sequence NULLS LAST, p.created_at, p.event_id) AS position
  FROM replay_pairs p WHERE (SELECT ok FROM allowed)
),
replay AS (
  INSERT INTO /*schema*/relaybus_replays
    (mode, handlers, filter, requested_by, reason, state, created_at, updated_at, total, created, skipped, cursor,
     planned, start_xmax, hold_from)
  SELECT $1::text, $2::text[], $11::text::jsonb, $9::text, $10::text, 'running', coalesce($12::timestamptz, now()),
         coalesce($12::timestamptz, now()), (SELECT count(*) FROM ordered), 0, 0, 0,
         coalesce((SELECT max(position) FROM ordered), 0), txid_snapshot_xmax(txid_current_snapshot()),
         (SELECT CASE WHEN q.is_called THEN q.last_value + 1 ELSE q.last_value END FROM /*schema*/relaybus_key_order q
          WHERE EXISTS (SELECT 1 FROM /*schema*/relaybus_deliveries d
                        WHERE d.key IS NOT NULL AND d.status = 'pending' AND d.handler = ANY ($2::text[])))
  WHERE (SELECT ok FROM allowed)
  RETURNING id
),
planned AS (
  INSERT INTO /*schema*/relaybus_replay_items (replay_id, position, handler, event_id, sequence, max_attempts)
  SELECT r.id, o.position, o.handler, o.event_id, o.sequence, o.max_attempts FROM replay r CROSS JOIN ordered o
)
SELECT (SELECT id::text FROM replay) AS id, (SELECT id::text FROM running) AS running,
       (SELECT event_type FROM unsubscribed) AS unsubscribed_type, (SELECT handler FROM unsubscribed) AS unsubscribed_handler
