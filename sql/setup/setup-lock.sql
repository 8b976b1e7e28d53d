-- setup-lock: serialise setup() of one schema across processes for the rest of the transaction.
-- index: none (transaction-level advisory lock keyed by the schema name)
-- params: $1 schema name text
-- returns: one row (locked = true)
SELECT pg_advisory_xact_lock(hashtextextended('relaybus:setup:' || $1::text, 0)) IS NULL AS locked
