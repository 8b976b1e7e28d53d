-- replay-lock: serialise the starts of replays (the first statement of replay-start's transaction): a transaction-
--              scoped advisory lock, held until commit, so of two starts for the same handler the second sees the
--              first's running replay (its own statements take their snapshots after the lock). Starts are rare: one
--              lock for all of them.
-- index: none
-- params: none
-- returns: one row, locked ('' once the lock is held)
SELECT pg_advisory_xact_lock('/*schema*/relaybus_replays'::regclass::oid::int, 0)::text AS locked
