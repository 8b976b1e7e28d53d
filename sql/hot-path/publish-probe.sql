-- publish-probe: before a store's first publish, in the caller's transaction: which relations the publish statements
--                name are missing from the schema, and whether the deliveries table has relaybus 0.1's row-lease
--                layout (its lease_token column). Catalog reads only (not to_regclass, which raises without USAGE on
--                the schema), so it cannot abort the caller's transaction; the store runs it until the schema is found.
-- index: none (catalog lookups)
-- params: $1 schema name text, $2 relation names text[] (every relation the publish statements name)
-- returns: one row: missing text[] (the names of $2 not in the schema, sorted), row_lease boolean
SELECT ARRAY(
         SELECT r.name FROM unnest($2::text[]) AS r(name)
         WHERE NOT EXISTS (
           SELECT 1 FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = $1::text AND c.relname = r.name
         )
         ORDER BY 1
       ) AS missing,
       EXISTS (
         SELECT 1 FROM pg_catalog.pg_attribute a
         JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
         JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
         WHERE n.nspname = $1::text AND c.relname = 'relaybus_deliveries' AND a.attname = 'lease_token'
           AND NOT a.attisdropped
       ) AS row_lease
