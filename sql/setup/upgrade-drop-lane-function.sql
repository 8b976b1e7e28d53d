-- upgrade-drop-lane-function: drop relaybus_lane(text) once the 0.1 upgrade has set every lane (a fresh install has
--                             no function: new deliveries get their lane from src/core/lanes.ts).
-- index: none
-- params: none
-- returns: nothing
DROP FUNCTION IF EXISTS /*schema*/relaybus_lane(text)
