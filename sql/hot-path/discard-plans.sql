-- discard-plans: drop the plans this connection cached for its prepared statements (they stay prepared): the next call
--                of each plans again, for the tables' sizes now. Run by a claim session on the connection it holds
--                once a table has outgrown the size its claims were planned at while its statistics were left as they
--                were (src/postgres/plan-sizes.ts): a generic plan made on a heap of a page or two scans the heap for
--                every key it visits, and nothing else makes it plan again until the statistics change.
-- index: none
-- params: none
-- returns: nothing
DISCARD PLANS
