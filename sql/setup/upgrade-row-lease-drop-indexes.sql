-- upgrade-row-lease-drop-indexes: 0.1 upgrade, first step: drop the 0.1 secondary indexes of deliveries (due time,
--                                 unkeyed due time, key order, processing leases, status, handler, completed and dead
--                                 purge), so the conversion's writes do not maintain them. Idempotent.
-- index: drops relaybus_deliveries_{due,due_unkeyed,key_order,processing,status_created,handler_created,completed,dead}_idx
-- params: none
-- returns: nothing
DROP INDEX IF EXISTS /*schema*/relaybus_deliveries_due_idx, /*schema*/relaybus_deliveries_due_unkeyed_idx,
  /*schema*/relaybus_deliveries_key_order_idx, /*schema*/relaybus_deliveries_processing_idx,
  /*schema*/relaybus_deliveries_status_created_idx, /*schema*/relaybus_deliveries_handler_created_idx,
  /*schema*/relaybus_deliveries_completed_idx, /*schema*/relaybus_deliveries_dead_idx
