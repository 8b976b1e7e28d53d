-- upgrade-row-lease-deliveries-layout: 0.1 upgrade, final step: deliveries as migration 0000_init creates them. The
--                                      lease columns and completed_at go (with any index left on them), lane becomes
--                                      required, column defaults go, and the check constraints are those of 0000
--                                      (status without 'processing'). The foreign key is dropped here and added again
--                                      by the 0000 statements (without 0.1's cascade). Later migrations apply on top.
-- index: none (catalog change; the checks and NOT NULL scan the table once, under the final step's lock)
-- params: none
-- returns: nothing
ALTER TABLE /*schema*/relaybus_deliveries
  DROP CONSTRAINT IF EXISTS relaybus_deliveries_event_id_fkey,
  DROP CONSTRAINT IF EXISTS relaybus_deliveries_status_check,
  DROP CONSTRAINT IF EXISTS relaybus_deliveries_lane_check,
  DROP CONSTRAINT IF EXISTS relaybus_deliveries_attempts_check,
  DROP COLUMN IF EXISTS lease_owner,
  DROP COLUMN IF EXISTS lease_token,
  DROP COLUMN IF EXISTS lease_expires_at,
  DROP COLUMN IF EXISTS completed_at,
  ALTER COLUMN lane SET NOT NULL,
  ALTER COLUMN event_id DROP DEFAULT, ALTER COLUMN handler DROP DEFAULT, ALTER COLUMN key DROP DEFAULT,
  ALTER COLUMN sequence DROP DEFAULT, ALTER COLUMN status DROP DEFAULT, ALTER COLUMN attempts DROP DEFAULT,
  ALTER COLUMN max_attempts DROP DEFAULT, ALTER COLUMN claims DROP DEFAULT, ALTER COLUMN available_at DROP DEFAULT,
  ALTER COLUMN last_error DROP DEFAULT, ALTER COLUMN created_at DROP DEFAULT, ALTER COLUMN updated_at DROP DEFAULT,
  ADD CONSTRAINT relaybus_deliveries_lane_check CHECK (lane >= 0 AND lane < 256),
  ADD CONSTRAINT relaybus_deliveries_status_check CHECK (status IN ('pending', 'dead', 'completed')),
  ADD CONSTRAINT relaybus_deliveries_attempts_check CHECK (attempts >= 0 AND max_attempts >= 1)
