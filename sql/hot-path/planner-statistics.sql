-- planner-statistics: whether the planner's statistics of the deliveries and events tables are stale: the table has
--                     grown to more than twice the pages its statistics last saw (and past 4 pages), or holds more
--                     than twice the rows they counted (and past 100: a table that kept its pages after a drain was
--                     analyzed with no rows in them, and reads to the planner as empty however full it gets), and it
--                     holds at least the rows they counted now (up to 10,000: a table that full is never read as
--                     empty). The claims run as generic plans made from those statistics; a table last analyzed or
--                     vacuumed while nearly empty (the steady state of a table that deletes on completion) reads as a
--                     page or two, and the plans then read every row for each look-up once a backlog builds. The last
--                     condition keeps an ANALYZE from catching a queue at a low moment: pages kept through a drain,
--                     or a live-rows counter that has the inserts of the last second and not yet the deletes (each
--                     session flushes its counters at most once a second), would otherwise analyze a table into the
--                     few rows it holds between bursts, and its indexes' pages then price every look-up above a read
--                     of the heap. Run now and then by a worker's claim sessions (src/postgres/statistics-keeper.ts),
--                     which analyze a stale table they own.
-- index: pg_class_oid_index (two catalog rows); the tables' sizes from the storage manager, their live rows from the
--        cumulative statistics (as of the last flush of the sessions' counters); only when those say stale, the
--        table's heap from its start, up to the rows the statistics counted (10,000 at most)
-- params: none
-- returns: one row per table: name ('deliveries' | 'events'), stale, owned (this role may analyze it), pages (the heap's
--          pages now), analyzed_pages and analyzed_rows (the statistics: what the last ANALYZE or VACUUM saw)
SELECT t.name,
       CASE WHEN NOT s.outgrown THEN false
            WHEN s.counted = 0 THEN true
            WHEN t.name = 'deliveries'
              THEN (SELECT count(*) FROM (SELECT FROM /*schema*/relaybus_deliveries LIMIT s.counted) AS held) >= s.counted
            ELSE (SELECT count(*) FROM (SELECT FROM /*schema*/relaybus_events LIMIT s.counted) AS held) >= s.counted
       END AS stale,
       pg_has_role(c.relowner, 'USAGE') AS owned,
       p.pages::int AS pages, c.relpages::int AS analyzed_pages, c.reltuples::float8 AS analyzed_rows
FROM (VALUES ('deliveries', '/*schema*/relaybus_deliveries'::regclass),
             ('events', '/*schema*/relaybus_events'::regclass)) AS t(name, oid)
JOIN pg_class c ON c.oid = t.oid
CROSS JOIN LATERAL (
  SELECT pg_relation_size(c.oid) / current_setting('block_size')::int AS pages
) AS p
CROSS JOIN LATERAL (
  SELECT p.pages > 2 * (greatest(c.relpages, 0) + 2)
           OR pg_stat_get_live_tuples(c.oid) > 2 * (greatest(c.reltuples, 0) + 50) AS outgrown,
         least(greatest(c.reltuples, 0), 10000)::bigint AS counted
) AS s
