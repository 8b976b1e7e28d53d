-- 0004: handlers an operator paused (relaybus handlers pause): one row each while paused. Every claim statement reads
-- it, so no worker claims a paused handler's deliveries from its next claim on; publishing is unchanged (they wait, in
-- order, until the handler is resumed). A new empty table: nothing is rewritten.
CREATE TABLE "relaybus"."relaybus_paused_handlers" (
	"handler" text PRIMARY KEY NOT NULL,
	"paused_at" timestamp with time zone NOT NULL,
	"reason" text
);
