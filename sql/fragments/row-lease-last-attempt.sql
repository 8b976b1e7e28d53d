-- fragment row-lease-last-attempt: the one rule that decides what the 0.1 upgrade does with a delivery a 0.1 worker had
--          in flight (status processing, alias d): true when its claim spent its last attempt, so the upgrade makes it
--          dead (as a takeover would); false: it goes back to pending. upgrade-row-lease-release applies it and
--          upgrade-row-lease-plan counts with it (the dry run), so the plan and the upgrade cannot disagree.
(d.attempts >= d.max_attempts)
