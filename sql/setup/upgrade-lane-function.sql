-- upgrade-lane-function: relaybus_lane(text), the lane of a delivery in SQL for the 0.1 upgrade: FNV-1a (32-bit) of
--                        the UTF-8 bytes of its ordering key (or event id), modulo 256, exactly as src/core/lanes.ts
--                        computes it for new deliveries (a test compares the two). One byte per step of a recursive
--                        query, so it stays a single SQL statement; the upgrade drops it when it is done.
-- index: none
-- params: none ("relaybus" schema marker only)
-- returns: nothing (creates or replaces the function)
CREATE OR REPLACE FUNCTION /*schema*/relaybus_lane(source text) RETURNS smallint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $relaybus_lane$
  WITH RECURSIVE input AS (
    SELECT convert_to(source, 'UTF8') AS bytes
  ),
  fold (i, hash) AS (
    SELECT 0, 2166136261::bigint
    UNION ALL
    SELECT f.i + 1, ((f.hash # get_byte(input.bytes, f.i)) * 16777619) % 4294967296
    FROM fold f, input WHERE f.i < length(input.bytes)
  )
  SELECT (f.hash % 256)::smallint FROM fold f, input WHERE f.i = length(input.bytes)
$relaybus_lane$
