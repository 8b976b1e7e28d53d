CREATE SCHEMA "relaybus";
--> statement-breakpoint
CREATE TABLE "relaybus"."relaybus_completed_deliveries" (
	"delivery_id" bigint NOT NULL,
	"event_id" text NOT NULL,
	"event_type" text NOT NULL,
	"handler" text NOT NULL,
	"lane" smallint NOT NULL,
	"key" text,
	"sequence" bigint,
	"attempts" integer NOT NULL,
	"max_attempts" integer NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"completed_at" timestamp with time zone NOT NULL,
	CONSTRAINT "relaybus_completed_deliveries_pkey" PRIMARY KEY("delivery_id")
);
--> statement-breakpoint
CREATE TABLE "relaybus"."relaybus_deliveries" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "relaybus"."relaybus_deliveries_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"event_id" text NOT NULL,
	"handler" text NOT NULL,
	"lane" smallint NOT NULL,
	"key" text,
	"sequence" bigint,
	"status" text NOT NULL,
	"attempts" integer NOT NULL,
	"max_attempts" integer NOT NULL,
	"claims" integer NOT NULL,
	"available_at" timestamp with time zone NOT NULL,
	"last_error" text,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	CONSTRAINT "relaybus_deliveries_lane_check" CHECK (lane >= 0 AND lane < 256),
	CONSTRAINT "relaybus_deliveries_status_check" CHECK (status IN ('pending', 'dead', 'completed')),
	CONSTRAINT "relaybus_deliveries_attempts_check" CHECK (attempts >= 0 AND max_attempts >= 1)
);
--> statement-breakpoint
CREATE TABLE "relaybus"."relaybus_events" (
	"id" text PRIMARY KEY NOT NULL,
	"type" text NOT NULL,
	"key" text,
	"payload" jsonb NOT NULL,
	"headers" jsonb NOT NULL,
	"handlers" text[] NOT NULL,
	"created_at" timestamp with time zone NOT NULL
);
--> statement-breakpoint
CREATE TABLE "relaybus"."relaybus_key_sequences" (
	"key" text PRIMARY KEY NOT NULL,
	"last_sequence" bigint NOT NULL
);
--> statement-breakpoint
CREATE TABLE "relaybus"."relaybus_lanes" (
	"lane" smallint PRIMARY KEY NOT NULL,
	"epoch" bigint DEFAULT 0 NOT NULL,
	"lease_owner" text,
	"lease_expires_at" timestamp with time zone,
	"in_flight" bigint[] DEFAULT '{}' NOT NULL,
	CONSTRAINT "relaybus_lanes_lane_check" CHECK (lane >= 0 AND lane < 256)
);
--> statement-breakpoint
CREATE TABLE "relaybus"."relaybus_migrations" (
	"name" text PRIMARY KEY NOT NULL,
	"applied_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
ALTER TABLE "relaybus"."relaybus_deliveries" ADD CONSTRAINT "relaybus_deliveries_event_id_fkey" FOREIGN KEY ("event_id") REFERENCES "relaybus"."relaybus_events"("id") ON DELETE no action ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "relaybus_completed_deliveries_completed_at_idx" ON "relaybus"."relaybus_completed_deliveries" USING btree ("completed_at");--> statement-breakpoint
CREATE UNIQUE INDEX "relaybus_deliveries_event_id_handler_idx" ON "relaybus"."relaybus_deliveries" USING btree ("event_id","handler");--> statement-breakpoint
CREATE INDEX "relaybus_deliveries_lane_available_at_id_idx" ON "relaybus"."relaybus_deliveries" USING btree ("lane","available_at","id") WHERE status = 'pending';--> statement-breakpoint
CREATE INDEX "relaybus_deliveries_lane_handler_key_sequence_idx" ON "relaybus"."relaybus_deliveries" USING btree ("lane","handler","key","sequence") WHERE key IS NOT NULL AND status = 'pending';--> statement-breakpoint
CREATE INDEX "relaybus_deliveries_updated_at_id_idx" ON "relaybus"."relaybus_deliveries" USING btree ("updated_at","id") WHERE status = 'dead';