-- fragment runnable-handlers: the CTE runnable of the claim statements (acquire-lanes, claim-held-lanes, claim-light;
--          spliced in where they say /*include runnable-handlers*/): the handlers asked for ($2) less the paused ones
--          (relaybus_paused_handlers), read once by the statement and used wherever a row's handler is judged. A paused
--          handler's deliveries are not picked, nor their lanes taken, by any worker from the claim after its pause on;
--          they stay pending, in their keys' order, until it is resumed.
--          held: the handlers of $2 with a running replay (relaybus_replays_running_idx). Their keyed deliveries that
--          no replay created wait while it runs (a keyed row may run only if replay_id IS NOT NULL OR handler <> ALL
--          (held)), so each key's replayed history runs before its live deliveries; unkeyed ones run as usual.
runnable AS MATERIALIZED (
  SELECT ARRAY(SELECT h FROM unnest($2::text[]) AS h
               WHERE h NOT IN (SELECT p.handler FROM /*schema*/relaybus_paused_handlers p)) AS handlers,
         ARRAY(SELECT h FROM unnest($2::text[]) AS h
               WHERE EXISTS (SELECT 1 FROM /*schema*/relaybus_replays r
                             WHERE r.state = 'running' AND h = ANY (r.handlers))) AS held
)
