-- fragment runnable-handlers: the CTE runnable of the claim statements (acquire-lanes, claim-held-lanes, claim-light;
--          spliced in where they say /*include runnable-handlers*/): the handlers asked for ($2) less the paused ones
--          (relaybus_paused_handlers), read once by the statement and used wherever a row's handler is judged. A paused
--          handler's deliveries are not picked, nor their lanes taken, by any worker from the claim after its pause on;
--          they stay pending, in their keys' order, until it is resumed.
--          held: the handlers of $2 with a running replay (relaybus_replays_running_idx), and hold_from: below which
--          key-order value their live keyed rows may run. A keyed row may run only if replay_id IS NOT NULL OR handler
--          <> ALL (held) OR sequence < hold_from, so each key's replayed history runs before its live deliveries; unkeyed
--          ones run as usual. hold_from is the smallest of the replay's hold_from (the first value a publish after its
--          start can get) and the sequence of its next planned item (items are taken in sequence order): a row below
--          it has every replayed row of its key that sorts before it created already, pending (so it waits behind
--          them in its key) or done, and a row published before the start is not held behind history it precedes.
--          A replay's hold_from is null when none of its handlers' keyed deliveries was pending at its start (or it
--          started before 0006): every live keyed row waits, and hold_from here is the smallest bigint.
--          held_bounds: for each handler of held (in the same order), the sequence of its replay's next planned item,
--          else the replay's hold_from (null when neither is known). A live row of the handler at or above it is held,
--          and the rows its replay created so far sort below it (but while a late commit's item, planned after the
--          others, is next). So scans that follow a key's order (a completed row's successor, a head's followers) stop
--          there rather than read the held rows behind it; what such a stop leaves out is picked as its key's head by
--          a later claim, never out of order (a run only ends sooner).
--          Read once, from the running replays (relaybus_replays_running_idx) and each one's next item
--          (relaybus_replay_items_pkey).
runnable AS MATERIALIZED (
  SELECT ARRAY(SELECT h FROM unnest($2::text[]) AS h
               WHERE h NOT IN (SELECT p.handler FROM /*schema*/relaybus_paused_handlers p)) AS handlers,
         coalesce(r.held, '{}') AS held, coalesce(r.bounds, '{}') AS held_bounds, r.hold_from
  FROM (
    -- The running replays read once: a row per handler of $2 that one of them replays (a handler has at most one).
    SELECT array_agg(x.handler ORDER BY x.handler) AS held,
           array_agg(coalesce(n.sequence, r.hold_from) ORDER BY x.handler) AS bounds,
           min(least(coalesce(r.hold_from, '-9223372036854775808'::bigint), n.sequence)) AS hold_from
    FROM /*schema*/relaybus_replays r
    CROSS JOIN LATERAL unnest(r.handlers) AS x(handler)
    LEFT JOIN LATERAL (
      SELECT i.sequence FROM /*schema*/relaybus_replay_items i
      WHERE i.replay_id = r.id AND i.position = r.cursor + 1 LIMIT 1
    ) n ON true
    WHERE r.state = 'running' AND x.handler = ANY ($2::text[])
  ) r
)
