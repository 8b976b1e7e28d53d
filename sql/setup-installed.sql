-- setup-installed: does the schema already have the migrations table (is this an upgrade)?
-- index: none (catalog lookup)
-- params: $1 schema name text
-- returns: one row: installed boolean
SELECT to_regclass(format('%I.relaybus_migrations', $1::text)) IS NOT NULL AS installed
