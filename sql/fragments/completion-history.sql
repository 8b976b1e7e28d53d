-- fragment completion-history: the CTE history of complete-many, complete-one and claim-held-lanes (spliced in
--          where a statement says /*include completion-history*/): one completion-history row per row of the
--          statement's deleted CTE, when its history_params(enabled, completed_at) say so.
history AS (
  INSERT INTO /*schema*/relaybus_completed_deliveries
    (delivery_id, event_id, event_type, handler, lane, key, sequence, attempts, max_attempts, created_at, completed_at)
  SELECT d.id, d.event_id, coalesce(d.event_type, e.type), d.handler, d.lane, d.key, d.sequence, d.attempts, d.max_attempts, d.created_at,
         (SELECT completed_at FROM history_params)
  -- An event published inline (history was off then) has no events row: its delivery carried its type.
  FROM deleted d LEFT JOIN /*schema*/relaybus_events e ON e.id = d.event_id AND d.event_type IS NULL
  WHERE (SELECT enabled FROM history_params)
)
