-- publish-guard: mark the caller's transaction for the publish statement that follows (pipelined with it where the
--                driver allows). The marker is transaction-local: inside a transaction block the publish sees it;
--                outside one (a transaction object used after its transaction ended: autocommit) it is gone at the
--                end of this statement, and the publish writes nothing and says so. No parameters, so postgres.js
--                sends it with the simple protocol and never holds back the statement after it.
-- index: none
-- params: none
-- returns: one row: marker ('on', the value the publish statements look for)
SELECT set_config('relaybus.publish_guard', 'on', true) AS marker
