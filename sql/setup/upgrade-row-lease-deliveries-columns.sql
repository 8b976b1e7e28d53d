-- upgrade-row-lease-deliveries-columns: 0.1 upgrade, first step: deliveries get lane (null until the conversion sets
--                                       it) and claims (0: no lane lease has claimed them yet). Idempotent; a
--                                       constant default adds the column without rewriting the table.
-- index: none
-- params: none
-- returns: nothing
ALTER TABLE /*schema*/relaybus_deliveries ADD COLUMN IF NOT EXISTS lane smallint,
  ADD COLUMN IF NOT EXISTS claims integer NOT NULL DEFAULT 0
