-- publish-undo: take back what this transaction's publish of a batch wrote, when one of the batch's ids turned out to
--               be a conflict only after the publish statement had run (a concurrent transaction inserted that id as a
--               different event and committed first, while the statement waited on it): a batch writes all or
--               nothing. Deletes the deliveries the publish added, the events it inserted, and takes the handlers it
--               added off events that existed. Everything named here was written by this transaction and is not yet
--               visible to any other.
-- index: relaybus_deliveries_lane_handler_key_sequence_idx and relaybus_deliveries_unkeyed_due_idx (the pending rows of
--        each delivery's lane, handler and key: a rare path); relaybus_events_pkey
-- params: $1 event ids text[], $2 handlers text[], $3 lanes smallint[], $4 keys text[] (one element per delivery the
--         publish added), $5 event ids the publish inserted text[]
-- returns: one row: deliveries removed, events removed, existing events whose handlers were restored
WITH added AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::smallint[], $4::text[]) AS a(event_id, handler, lane, key)
),
removed AS (
  DELETE FROM /*schema*/relaybus_deliveries d
  USING added a
  WHERE d.lane = a.lane AND d.handler = a.handler AND d.key IS NOT DISTINCT FROM a.key AND d.event_id = a.event_id
    AND d.status = 'pending'
  RETURNING d.id
),
dropped AS (
  DELETE FROM /*schema*/relaybus_events e WHERE e.id = ANY ($5::text[])
  RETURNING e.id
),
restored AS (
  UPDATE /*schema*/relaybus_events e
  SET handlers = ARRAY(
    SELECT h FROM unnest(e.handlers) AS h WHERE NOT EXISTS (SELECT 1 FROM added a WHERE a.event_id = e.id AND a.handler = h))
  WHERE e.id IN (SELECT event_id FROM added) AND e.id <> ALL ($5::text[])
  RETURNING e.id
)
SELECT (SELECT count(*) FROM removed)::int AS deliveries, (SELECT count(*) FROM dropped)::int AS events,
       (SELECT count(*) FROM restored)::int AS restored
