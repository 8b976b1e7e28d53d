-- fragment key-head: the head of a key, the subquery of a CROSS JOIN LATERAL in the claim statements
--          (claim-held-lanes's replayed, claim-light's replayed heads; spliced in where they say
--          /*include key-head*/): the pending row of handler k.handler and key k.key in lane s.lane with the
--          smallest sequence, all of the columns a claim picks. One descent of
--          relaybus_deliveries_lane_handler_key_sequence_idx.
SELECT d.id, d.lane, d.event_id, d.handler, d.key, d.sequence, d.attempts, d.max_attempts, d.claims,
       d.available_at, d.created_at, d.event_type, d.payload, d.headers, d.replay_id
FROM /*schema*/relaybus_deliveries d
WHERE d.lane = s.lane AND d.handler = k.handler AND d.key = k.key AND d.key IS NOT NULL AND d.status = 'pending'
ORDER BY d.handler, d.key, d.sequence
LIMIT 1
