-- upgrade-row-lease-leases: the leases 0.1 workers still hold (deliveries in status processing whose lease has not
--                           expired). The upgrade refuses while there are any: a running 0.1 worker would fail on the
--                           dropped columns, and its delivery would run twice.
-- index: none: a scan of deliveries (the 0.1 indexes are gone by the time the final step runs this, under its lock)
-- params: $1 now timestamptz (null = now())
-- returns: one row: leased, lease_owners text[], leased_until timestamptz
SELECT count(*)::int AS leased,
       coalesce(array_agg(DISTINCT d.lease_owner) FILTER (WHERE d.lease_owner IS NOT NULL), '{}') AS lease_owners,
       max(d.lease_expires_at) AS leased_until
FROM /*schema*/relaybus_deliveries d
WHERE d.status = 'processing' AND d.lease_expires_at > coalesce($1::timestamptz, now())
