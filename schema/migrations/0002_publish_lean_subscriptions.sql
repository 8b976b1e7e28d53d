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
);--> statement-breakpoint
-- relaybus_lane(source): the lane of a delivery, FNV-1a (32-bit) of the UTF-8 bytes of its ordering key (or event
-- id) modulo 256, exactly as src/core/lanes.ts computes it (a test compares the two on 100,000 keys).
CREATE OR REPLACE FUNCTION "relaybus".relaybus_lane(source text) RETURNS smallint
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $relaybus_lane$
DECLARE
  bytes bytea := convert_to(source, 'UTF8');
  hash bigint := 2166136261;
BEGIN
  FOR i IN 0 .. length(bytes) - 1 LOOP
    hash := ((hash # get_byte(bytes, i)) * 16777619) % 4294967296;
  END LOOP;
  RETURN (hash % 256)::smallint;
END
$relaybus_lane$;--> statement-breakpoint
-- relaybus_publish(type, payload, key, id, headers, available_at, allow_no_subscribers): what bus.publish does, from
-- SQL (triggers, any language's client), in the caller's transaction: fan-out to the active subscriptions of the type,
-- the same lane, the same per-key commit order (advisory lock per key, then the key-order sequence), the same inbox
-- dedup (an existing id gets deliveries only for handlers it never had; a different type, key or payload is an
-- error). Payloads are not checked against their TypeBox schema here: a worker buries a delivery whose payload fails
-- it. Returns the event id (generated when id is null).
CREATE OR REPLACE FUNCTION "relaybus".relaybus_publish(
  type text, payload jsonb, key text DEFAULT NULL, id text DEFAULT NULL, headers jsonb DEFAULT '{}',
  available_at timestamptz DEFAULT NULL, allow_no_subscribers boolean DEFAULT false
) RETURNS text
LANGUAGE plpgsql VOLATILE AS $relaybus_publish$
DECLARE
  event_id text := coalesce(relaybus_publish.id, gen_random_uuid()::text);
  fanout_handlers text[];
  fanout_attempts int[];
  stored record;
  added text[];
  key_sequence bigint;
BEGIN
  IF relaybus_publish.type IS NULL OR relaybus_publish.type = '' THEN
    RAISE EXCEPTION 'relaybus_publish: type must be a non-empty text' USING ERRCODE = '22023';
  END IF;
  IF relaybus_publish.payload IS NULL THEN
    RAISE EXCEPTION 'relaybus_publish: payload must not be NULL (publish ''{}'' or ''null''::jsonb for an empty one)' USING ERRCODE = '22004';
  END IF;
  IF relaybus_publish.headers IS NULL OR jsonb_typeof(relaybus_publish.headers) <> 'object'
     OR EXISTS (SELECT 1 FROM jsonb_each(relaybus_publish.headers) h WHERE jsonb_typeof(h.value) <> 'string') THEN
    RAISE EXCEPTION 'relaybus_publish: headers must be a JSON object of strings' USING ERRCODE = '22023';
  END IF;
  -- The limits bus.publish checks: names of 1 to 200 characters, dates in years 1 to 9999.
  IF length(relaybus_publish.type) > 200 OR length(relaybus_publish.key) NOT BETWEEN 1 AND 200 OR length(relaybus_publish.id) NOT BETWEEN 1 AND 200 THEN
    RAISE EXCEPTION 'relaybus_publish: type, key and id must be 1 to 200 characters (key and id may be NULL)' USING ERRCODE = '22023';
  END IF;
  IF NOT isfinite(relaybus_publish.available_at) OR relaybus_publish.available_at >= '10000-01-01 00:00:00+00'::timestamptz
     OR relaybus_publish.available_at < '0001-01-01 00:00:00+00'::timestamptz THEN
    RAISE EXCEPTION 'relaybus_publish: available_at must be a date in the years 1 to 9999' USING ERRCODE = '22023';
  END IF;
  SELECT array_agg(s.handler ORDER BY s.handler), array_agg(s.max_attempts ORDER BY s.handler)
    INTO fanout_handlers, fanout_attempts
    FROM "relaybus".relaybus_subscriptions s WHERE s.event_type = relaybus_publish.type AND s.active;
  IF fanout_handlers IS NULL THEN
    IF allow_no_subscribers THEN RETURN NULL; END IF;
    RAISE EXCEPTION 'relaybus_publish: event type "%" has no subscription, so publishing it would deliver to nobody; start a worker that registers its handlers (or run relaybus setup --subscriptions), or pass allow_no_subscribers => true', relaybus_publish.type
      USING ERRCODE = 'P0002';
  END IF;
  SELECT e.type, e.key, e.payload, e.handlers INTO stored
    FROM "relaybus".relaybus_events e WHERE e.id = event_id FOR UPDATE;
  IF FOUND THEN
    IF stored.type <> relaybus_publish.type OR stored.key IS DISTINCT FROM relaybus_publish.key OR stored.payload <> relaybus_publish.payload THEN
      RAISE EXCEPTION 'relaybus_publish: event id "%" exists with another type, key or payload (stored type "%", key %); publish a different event under a new id', event_id, stored.type, coalesce('"' || stored.key || '"', 'null')
        USING ERRCODE = '23505';
    END IF;
    added := ARRAY(SELECT h FROM unnest(fanout_handlers) AS h WHERE h <> ALL (stored.handlers) ORDER BY h);
    IF cardinality(added) = 0 THEN RETURN event_id; END IF;
    UPDATE "relaybus".relaybus_events e SET handlers = e.handlers || added WHERE e.id = event_id;
  ELSE
    added := fanout_handlers;
    INSERT INTO "relaybus".relaybus_events (id, type, key, payload, headers, handlers, created_at)
    VALUES (event_id, relaybus_publish.type, relaybus_publish.key, relaybus_publish.payload, relaybus_publish.headers, added, now());
  END IF;
  IF relaybus_publish.key IS NOT NULL THEN
    -- Held until commit: a later transaction of this key takes its sequence value only after this one committed.
    PERFORM pg_advisory_xact_lock('"relaybus".relaybus_events'::regclass::oid::int, hashtext(relaybus_publish.key));
    key_sequence := nextval('"relaybus".relaybus_key_order');
  END IF;
  INSERT INTO "relaybus".relaybus_deliveries
    (event_id, handler, lane, key, sequence, status, attempts, max_attempts, claims, available_at, created_at, updated_at)
  SELECT event_id, f.handler, "relaybus".relaybus_lane(coalesce(relaybus_publish.key, event_id)), relaybus_publish.key,
         key_sequence, 'pending', 0, f.max_attempts, 0, coalesce(relaybus_publish.available_at, now()), now(), now()
  FROM unnest(fanout_handlers, fanout_attempts) AS f(handler, max_attempts)
  WHERE f.handler = ANY (added)
  ORDER BY f.handler;
  PERFORM pg_notify(left('relaybus_' || n.nspname, 63), '') FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE c.oid = '"relaybus".relaybus_events'::regclass;
  RETURN event_id;
END
$relaybus_publish$;
