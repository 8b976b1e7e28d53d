-- 0003: an event without an id of the caller's, with a small payload and no completion history, is published without
-- an events row: its deliveries carry its type, payload and headers (one heap row and one primary-key entry fewer per
-- event). Nullable columns without a default: a catalog change only, no table rewrite.
ALTER TABLE "relaybus"."relaybus_deliveries" ADD COLUMN "event_type" text;--> statement-breakpoint
ALTER TABLE "relaybus"."relaybus_deliveries" ADD COLUMN "payload" jsonb;--> statement-breakpoint
ALTER TABLE "relaybus"."relaybus_deliveries" ADD COLUMN "headers" jsonb;