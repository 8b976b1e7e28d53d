-- upgrade-row-lease-key-sequences: 0.1 upgrade, final step: each ordering key's counter starts after the highest
--                                  sequence its deliveries (and their history) carry, so an event published after the
--                                  upgrade is ordered after every one published before it. Keeps a higher counter.
-- index: relaybus_key_sequences_pkey; a scan of deliveries and of the history (under the final step's lock)
-- params: none
-- returns: one row: keys (how many counters were written)
WITH highest AS (
  SELECT k.key, max(k.sequence) AS last_sequence
  FROM (
    SELECT d.key, d.sequence FROM /*schema*/relaybus_deliveries d WHERE d.key IS NOT NULL AND d.sequence IS NOT NULL
    UNION ALL
    SELECT h.key, h.sequence FROM /*schema*/relaybus_completed_deliveries h WHERE h.key IS NOT NULL AND h.sequence IS NOT NULL
  ) k
  GROUP BY k.key
),
written AS (
  INSERT INTO /*schema*/relaybus_key_sequences AS s (key, last_sequence)
  SELECT key, last_sequence FROM highest ORDER BY key
  ON CONFLICT (key) DO UPDATE SET last_sequence = greatest(s.last_sequence, excluded.last_sequence)
  WHERE s.last_sequence < excluded.last_sequence
  RETURNING s.key
)
SELECT count(*)::int AS keys FROM written
