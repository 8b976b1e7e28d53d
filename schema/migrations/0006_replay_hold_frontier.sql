-- 0006: the replay's hold narrowed and cheap to skip: relaybus_replays.hold_from (the first key-order value a publish
-- after the start can get: live keyed rows below it are not held) and relaybus_deliveries_replayed_idx (a running
-- replay's pending keyed rows by key: the claim finds replayed heads there instead of walking every held key; it holds
-- no published row). A nullable column without a default and an index over no existing row but replayed ones.
ALTER TABLE "relaybus"."relaybus_replays" ADD COLUMN "hold_from" bigint;--> statement-breakpoint
CREATE INDEX "relaybus_deliveries_replayed_idx" ON "relaybus"."relaybus_deliveries" USING btree ("lane","handler","key","sequence") WHERE replay_id IS NOT NULL AND key IS NOT NULL AND status = 'pending';