-- postgres-supplement: what drizzle-kit cannot express, applied by setup() after the migrations; idempotent.
-- why: lane rows must stay on their page when in_flight grows, so every lane update is heap-only (HOT): the table
--      keeps half of each page free (fillfactor 50) and each lane row is first written wide (a 120-id placeholder),
--      which spreads the 256 lanes four to a page, then emptied in the same transaction; deliveries are deleted on
--      completion, so autovacuum must visit them early; the 256 lane rows are data.
-- params: none ("relaybus" is replaced by the configured schema name)
ALTER TABLE "relaybus"."relaybus_lanes" SET (fillfactor = 50);
--> statement-breakpoint
ALTER TABLE "relaybus"."relaybus_deliveries" SET (autovacuum_vacuum_scale_factor = 0.02);
--> statement-breakpoint
INSERT INTO "relaybus"."relaybus_lanes" (lane, epoch, in_flight)
SELECT lane, -1, array_fill(0::bigint, ARRAY[120]) FROM generate_series(0, 255) AS lane
ON CONFLICT (lane) DO NOTHING;
--> statement-breakpoint
UPDATE "relaybus"."relaybus_lanes" SET epoch = 0, in_flight = '{}' WHERE epoch = -1;
