-- 0002: a leaner publish and subscriptions in the database.
-- Keyed order: one sequence plus a transaction-scoped advisory lock per key replaces the key-counter rows (the
-- sequence starts above every sequence already given, so keys keep their order across the upgrade). Deliveries lose
-- their foreign key and their unique (event_id, handler) index (events.handlers, read under the event row's lock,
-- keeps one delivery per handler). Subscriptions let a publish (and the SQL function relaybus_publish) fan out to the
-- handlers workers registered.
CREATE SEQUENCE "relaybus"."relaybus_key_order" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1;--> statement-breakpoint
SELECT setval('"relaybus"."relaybus_key_order"', greatest(
  (SELECT max(last_sequence) FROM "relaybus"."relaybus_key_sequences"),
  (SELECT max(sequence) FROM "relaybus"."relaybus_deliveries"), 1));--> statement-breakpoint
DROP TABLE "relaybus"."relaybus_key_sequences" CASCADE;--> statement-breakpoint
ALTER TABLE "relaybus"."relaybus_deliveries" DROP CONSTRAINT "relaybus_deliveries_event_id_fkey";--> statement-breakpoint
DROP INDEX "relaybus"."relaybus_deliveries_event_id_handler_idx";--> statement-breakpoint
CREATE TABLE "relaybus"."relaybus_subscriptions" (
	"event_type" text NOT NULL,
	"handler" text NOT NULL,
	"max_attempts" integer NOT NULL,
	"retry" jsonb,
	"active" boolean DEFAULT true NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	"seen_at" timestamp with time zone,
	CONSTRAINT "relaybus_subscriptions_pkey" PRIMARY KEY("event_type","handler"),
	CONSTRAINT "relaybus_subscriptions_max_attempts_check" CHECK (max_attempts >= 1)
);
