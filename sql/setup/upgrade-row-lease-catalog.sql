-- upgrade-row-lease-catalog: the columns of the relaybus tables of a schema, for the 0.1 upgrade's precondition check
--                            (src/postgres/upgrade/preconditions.ts): run before its first change, by the dry run and
--                            by every transaction of the upgrade, so a 0.1 layout that lacks a column the upgrade reads
--                            is refused before anything is written, not at the final step.
-- index: none (catalog lookups)
-- params: $1 schema name text, $2 table names text[]
-- returns: one row per column (in column order) of each table named that exists: table_name, kind (pg_class.relkind:
--          r a table, p partitioned, v a view, ...), column_name and column_type (format_type; both null for a relation
--          without columns)
SELECT c.relname::text AS table_name, c.relkind::text AS kind, a.attname::text AS column_name,
       format_type(a.atttypid, a.atttypmod) AS column_type
FROM pg_catalog.pg_class c
JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE n.nspname = $1::text AND c.relname = ANY ($2::text[])
ORDER BY c.relname, a.attnum
