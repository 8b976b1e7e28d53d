-- fragment replay-clock: the column replay_clock of the claim statements (claim-held-lanes, claim-light; spliced in
--          where they say /*include replay-clock*/): while a replay runs (any handler's), the statement's time,
--          coalesce($5, now()), as milliseconds since the epoch (float8, to the microsecond); NULL while none runs.
--          The worker measures its live deliveries' start lag on this clock (the one their available_at is in, so
--          the worker's own clock may differ) and reports it while a replay runs: what runReplay's yield slows down
--          for besides the waits its step sees (see src/dispatcher/live-lag.ts). One probe of
--          relaybus_replays_running_idx, whatever the handlers ($2): a replay slows for every worker's live traffic.
(SELECT (date_part('epoch', coalesce($5::timestamptz, now())) * 1000)::float8
 FROM /*schema*/relaybus_replays r WHERE r.state = 'running' LIMIT 1)
