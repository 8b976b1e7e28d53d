-- setup-record: remember that a migration was applied to this schema.
-- index: relaybus_migrations_pkey
-- params: $1 migration name text
-- returns: nothing
INSERT INTO /*schema*/relaybus_migrations (name) VALUES ($1::text) ON CONFLICT (name) DO NOTHING
