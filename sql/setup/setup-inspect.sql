-- setup-inspect: what the schema holds before setup() touches it: which relaybus table names exist, whether the
--                deliveries table has the row-lease layout of relaybus 0.1 (its lease_token column) and whether the
--                migrations table has the shape setup() writes. setup() decides from this row alone whether it
--                installs, migrates, upgrades from 0.1, or refuses an unknown layout.
-- index: none (catalog lookups)
-- params: $1 schema name text, $2 relaybus table names text[] (every table the migrations create)
-- returns: one row: schema_exists, tables text[] (the relaybus names present, any relation kind), row_lease boolean,
--          migrations_table boolean (relaybus_migrations is a table with a text column "name")
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_namespace n WHERE n.nspname = $1::text) AS schema_exists,
       ARRAY(
         SELECT c.relname::text FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1::text AND c.relname = ANY ($2::text[]) ORDER BY 1
       ) AS tables,
       EXISTS (
         SELECT 1 FROM pg_catalog.pg_attribute a
         WHERE a.attrelid = to_regclass(format('%I.relaybus_deliveries', $1::text)) AND a.attname = 'lease_token'
           AND NOT a.attisdropped
       ) AS row_lease,
       EXISTS (
         SELECT 1 FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
         WHERE a.attrelid = to_regclass(format('%I.relaybus_migrations', $1::text)) AND c.relkind = 'r'
           AND a.attname = 'name' AND a.atttypid = 'text'::regtype AND NOT a.attisdropped
       ) AS migrations_table
