-- report-live-lag: a worker's report of its live deliveries' start lag while a replay runs, sent to the replays that
--                  yield (runReplay listens on $1): per handler, the longest a delivery that started since the last
--                  report had been due when it started, as JSON ([[handler, ms], ...], the longest first). A NOTIFY,
--                  not a row: nothing is written, and a report nobody hears is gone (the next one is 100 ms later).
-- index: none
-- params: $1 channel text (the schema's lag channel), $2 payload text (JSON, under 8,000 bytes)
-- returns: one row: sent (true)
SELECT true AS sent FROM pg_notify($1::text, $2::text) AS n
