-- 0005: replay (store.startReplay, relaybus replay): the replays kept as an audit record, a running replay's plan
-- (relaybus_replay_items), the key-order value of each keyed event (events.sequence, null on the rows written before)
-- and the replay that created a delivery (deliveries.replay_id, null for published ones). Two new empty tables and two
-- nullable columns without a default: nothing is rewritten.
CREATE TABLE "relaybus"."relaybus_replay_items" (
	"replay_id" bigint NOT NULL,
	"position" bigint NOT NULL,
	"handler" text NOT NULL,
	"event_id" text NOT NULL,
	"sequence" bigint,
	"max_attempts" integer NOT NULL,
	CONSTRAINT "relaybus_replay_items_pkey" PRIMARY KEY("replay_id","position","handler")
);
--> statement-breakpoint
CREATE TABLE "relaybus"."relaybus_replays" (
	"id" bigint PRIMARY KEY GENERATED ALWAYS AS IDENTITY (sequence name "relaybus"."relaybus_replays_id_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1),
	"mode" text NOT NULL,
	"handlers" text[] NOT NULL,
	"filter" jsonb NOT NULL,
	"requested_by" text,
	"reason" text,
	"state" text NOT NULL,
	"created_at" timestamp with time zone NOT NULL,
	"updated_at" timestamp with time zone NOT NULL,
	"finished_at" timestamp with time zone,
	"total" bigint NOT NULL,
	"created" bigint NOT NULL,
	"skipped" bigint NOT NULL,
	"cursor" bigint NOT NULL,
	"planned" bigint NOT NULL,
	"start_xmax" bigint NOT NULL,
	"first_delivery_id" bigint,
	CONSTRAINT "relaybus_replays_mode_check" CHECK (mode IN ('backfill', 'redrive')),
	CONSTRAINT "relaybus_replays_state_check" CHECK (state IN ('running', 'finished', 'cancelled'))
);
--> statement-breakpoint
ALTER TABLE "relaybus"."relaybus_deliveries" ADD COLUMN "replay_id" bigint;--> statement-breakpoint
ALTER TABLE "relaybus"."relaybus_events" ADD COLUMN "sequence" bigint;--> statement-breakpoint
CREATE INDEX "relaybus_replays_running_idx" ON "relaybus"."relaybus_replays" USING btree ("id") WHERE state = 'running';