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
runnable AS MATERIALIZED (
  SELECT ARRAY(SELECT h FROM unnest($2::text[]) AS h
               WHERE h NOT IN (SELECT p.handler FROM /*schema*/relaybus_paused_handlers p)) AS handlers,
         ARRAY(SELECT h FROM unnest($2::text[]) AS h
               WHERE EXISTS (SELECT 1 FROM /*schema*/relaybus_replays r
                             WHERE r.state = 'running' AND h = ANY (r.handlers))) AS held,
         (SELECT min(least(coalesce(r.hold_from, '-9223372036854775808'::bigint),
                           (SELECT i.sequence FROM /*schema*/relaybus_replay_items i
                            WHERE i.replay_id = r.id AND i.position = r.cursor + 1 LIMIT 1)))
          FROM /*schema*/relaybus_replays r WHERE r.state = 'running' AND r.handlers && $2::text[]) AS hold_from
)
