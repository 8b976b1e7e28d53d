-- upgrade-row-lease-plan: what the 0.1 (row-lease) upgrade has to do, read without changing anything: deliveries by
--                         status, those still to convert (no lane yet, or completed: moved to the completion history),
--                         events, the processing ones the upgrade will make dead (their last attempt spent: the rule of
--                         sql/fragments/row-lease-last-attempt.sql, which upgrade-row-lease-release applies), the rows
--                         the new layout's checks would refuse, and the leases 0.1 workers still hold. Works before and
--                         after the upgrade added its columns (the lane is read through to_jsonb, which has it only once
--                         it exists).
-- index: none: one scan of deliveries and one count of events (an admin path, run once)
-- params: $1 now timestamptz (null = now())
-- returns: one row: deliveries, pending, processing, last_attempt (processing ones that become dead), completed, dead,
--          to_convert, events, unfit (rows kept with attempts < 0 or max_attempts < 1: the final step's check refuses them),
--          leased (processing rows whose lease has not expired), lease_owners text[], leased_until timestamptz
SELECT count(*)::int AS deliveries,
       count(*) FILTER (WHERE d.status = 'pending')::int AS pending,
       count(*) FILTER (WHERE d.status = 'processing')::int AS processing,
       count(*) FILTER (WHERE d.status = 'processing' AND /*include row-lease-last-attempt*/)::int AS last_attempt,
       count(*) FILTER (WHERE d.status = 'completed')::int AS completed,
       count(*) FILTER (WHERE d.status = 'dead')::int AS dead,
       count(*) FILTER (WHERE d.status = 'completed' OR to_jsonb(d) ->> 'lane' IS NULL)::int AS to_convert,
       (SELECT count(*) FROM /*schema*/relaybus_events)::int AS events,
       count(*) FILTER (WHERE d.status <> 'completed' AND (d.attempts < 0 OR d.max_attempts < 1))::int AS unfit,
       count(*) FILTER (WHERE d.status = 'processing' AND d.lease_expires_at > coalesce($1::timestamptz, now()))::int AS leased,
       coalesce(array_agg(DISTINCT d.lease_owner) FILTER (
         WHERE d.status = 'processing' AND d.lease_expires_at > coalesce($1::timestamptz, now()) AND d.lease_owner IS NOT NULL
       ), '{}') AS lease_owners,
       max(d.lease_expires_at) FILTER (WHERE d.status = 'processing' AND d.lease_expires_at > coalesce($1::timestamptz, now())) AS leased_until
FROM /*schema*/relaybus_deliveries d
