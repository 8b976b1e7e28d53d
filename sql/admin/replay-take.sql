-- replay-take: a replay's row, locked for the rest of the transaction (replayStep's first statement; two steps of one
--              replay run one after the other, and a cancel waits for a step), with what the step needs.
-- index: relaybus_replays_pkey
-- params: $1 replay id bigint
-- returns: the replay's row (no row: no such replay): state, mode, handlers, filter, cursor, planned, settled (every
--          transaction that was running when it started has ended, or it started 30 seconds ago: the late look may
--          run). The transactions are the server's, whichever database: one left idle in a transaction must not hold
--          the replay, and with it its handlers' live keyed deliveries, for longer than that.
SELECT r.state, r.mode, r.handlers, r.filter, r.cursor::text AS cursor, r.planned::text AS planned,
       (txid_snapshot_xmin(txid_current_snapshot()) >= r.start_xmax
        OR r.created_at <= now() - interval '30 seconds') AS settled
FROM /*schema*/relaybus_replays r
WHERE r.id = $1::bigint
FOR UPDATE
