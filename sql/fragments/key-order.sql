-- fragment key-order: the CTEs locked and numbered of every statement that gives keyed rows their key-order values
--          (publish-new, publish, requeue; spliced in where a statement says /*include key-order*/). The statement
--          defines keyed(pos, key): the rows to number, by position. Each key's transaction-scoped advisory lock is
--          taken first, in hash order (two statements never wait on each other in a circle; the class id keeps it
--          apart from the application's own advisory locks), held until commit; then one value of the key-order
--          sequence per row in pos order. Per key, sequence order is then commit order.
locked AS (
  SELECT count(pg_advisory_xact_lock('/*schema*/relaybus_events'::regclass::oid::int, k.hash)) AS n
  FROM (SELECT DISTINCT hashtext(key) AS hash FROM keyed ORDER BY 1) k
),
numbered AS (
  -- nextval above a sorted subquery: values follow pos order. After the locks (the initplan runs first).
  SELECT k.pos, nextval('/*schema*/relaybus_key_order') AS sequence
  FROM (SELECT pos FROM keyed WHERE (SELECT n FROM locked) >= 0 ORDER BY pos) k
)
