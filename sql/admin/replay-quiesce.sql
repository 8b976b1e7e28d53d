-- replay-quiesce: the last statement of a replay's start (after replay-start, in its transaction): every lane row
--                 rewritten, locked in lane order (the order every claim locks lanes in). A claim statement whose
--                 snapshot predates the start's commit skips each lane it then reads as changed (see seen in
--                 claim-held-lanes and claim-light), so no claim that began before the replay claims after it; later
--                 claims see the replay and hold its handlers' live keyed rows. Last, so the lanes stay locked (and
--                 every claim waits) only until the commit, not while the replay is planned.
-- index: relaybus_lanes_pkey (the 256 lane rows)
-- params: none
-- returns: one row: lanes (rewritten)
WITH locked AS (
  SELECT l.lane FROM /*schema*/relaybus_lanes l ORDER BY l.lane FOR NO KEY UPDATE
),
quiesced AS (
  UPDATE /*schema*/relaybus_lanes l SET in_flight = l.in_flight WHERE l.lane IN (SELECT lane FROM locked)
  RETURNING 1
)
SELECT count(*)::int AS lanes FROM quiesced
