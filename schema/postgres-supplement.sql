-- postgres-supplement: what drizzle-kit cannot express, applied by setup() after the migrations; idempotent.
-- why: the lanes table keeps half of every page free so each lane update stays heap-only (HOT);
--      deliveries are deleted on completion, so autovacuum must visit them early; the 256 lane rows are data.
-- params: none ("relaybus" is replaced by the configured schema name)
ALTER TABLE "relaybus"."relaybus_lanes" SET (fillfactor = 50);
--> statement-breakpoint
ALTER TABLE "relaybus"."relaybus_deliveries" SET (autovacuum_vacuum_scale_factor = 0.02);
--> statement-breakpoint
INSERT INTO "relaybus"."relaybus_lanes" (lane) SELECT generate_series(0, 255) ON CONFLICT (lane) DO NOTHING;
