-- fragment runnable-handlers: the CTE runnable of the claim statements (acquire-lanes, claim-held-lanes, claim-light;
--          spliced in where they say /*include runnable-handlers*/): the handlers asked for ($2) less the paused ones
--          (relaybus_paused_handlers), read once by the statement and used wherever a row's handler is judged. A paused
--          handler's deliveries are not picked, nor their lanes taken, by any worker from the claim after its pause on;
--          they stay pending, in their keys' order, until it is resumed.
runnable AS MATERIALIZED (
  SELECT ARRAY(SELECT h FROM unnest($2::text[]) AS h
               WHERE h NOT IN (SELECT p.handler FROM /*schema*/relaybus_paused_handlers p)) AS handlers
)
