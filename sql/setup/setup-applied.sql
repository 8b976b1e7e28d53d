-- setup-applied: names of the migrations already applied to this schema.
-- index: relaybus_migrations_pkey
-- params: none
-- returns: one row per applied migration
SELECT name FROM /*schema*/relaybus_migrations ORDER BY name
