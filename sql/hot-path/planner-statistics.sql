-- planner-statistics: whether the planner's statistics of the deliveries and events tables are stale: the table has
--                     grown to more than twice the pages its statistics last saw (and past 4 pages), or holds more
--                     than twice the rows they counted (and past 100: a table that kept its pages after a drain was
--                     analyzed with no rows in them, and reads to the planner as empty however full it gets). The claims
--                     run as generic plans made from those statistics; a table last analyzed or vacuumed while nearly
--                     empty (the steady state of a table that deletes on completion) reads as a page or two, and the
--                     plans then read every row for each look-up once a backlog builds. Run now and then by a worker's
--                     claim sessions (src/postgres/statistics-keeper.ts), which analyze a stale table they own.
-- index: pg_class_oid_index (two catalog rows); the tables' sizes from the storage manager, their live rows from the
--        cumulative statistics (as of the last flush of the sessions' counters, within a second or so)
-- params: none
-- returns: one row per table: name ('deliveries' | 'events'), stale, owned (this role may analyze it)
SELECT t.name,
       (pg_relation_size(c.oid) / current_setting('block_size')::int > 2 * (greatest(c.relpages, 0) + 2)
        OR pg_stat_get_live_tuples(c.oid) > 2 * (greatest(c.reltuples, 0) + 50)) AS stale,
       pg_has_role(c.relowner, 'USAGE') AS owned
FROM (VALUES ('deliveries', '/*schema*/relaybus_deliveries'::regclass),
             ('events', '/*schema*/relaybus_events'::regclass)) AS t(name, oid)
JOIN pg_class c ON c.oid = t.oid
