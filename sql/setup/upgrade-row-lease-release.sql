-- upgrade-row-lease-release: 0.1 upgrade, final step: deliveries a 0.1 worker had claimed (status processing, their
--                            lease expired: the workers are stopped) are pending again with the attempt their claim
--                            charged kept, as the new layout charges a lease that was lost; dead when that was their
--                            last attempt (as a takeover makes them): sql/fragments/row-lease-last-attempt.sql, the
--                            rule the dry run counts with.
-- index: none: a scan of deliveries (under the final step's lock)
-- params: $1 now timestamptz (null = now())
-- returns: one row: pending, dead (how many became which)
WITH released AS (
  UPDATE /*schema*/relaybus_deliveries d
  SET status = CASE WHEN /*include row-lease-last-attempt*/ THEN 'dead' ELSE 'pending' END,
      last_error = CASE WHEN /*include row-lease-last-attempt*/
                        THEN 'lease lost: a relaybus 0.1 worker had this delivery in flight on its last attempt when '
                             || 'the tables were upgraded'
                        ELSE d.last_error END,
      updated_at = coalesce($1::timestamptz, now())
  WHERE d.status = 'processing'
  RETURNING d.status
)
SELECT count(*) FILTER (WHERE status = 'pending')::int AS pending, count(*) FILTER (WHERE status = 'dead')::int AS dead
FROM released
