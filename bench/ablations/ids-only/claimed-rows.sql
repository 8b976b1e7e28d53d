-- fragment claimed-rows (ablation): only each claimed delivery's id, as the tuples of sql/fragments/claimed-rows.sql
--          begin; what writing the rest of each row costs the claim.
(SELECT '[' || string_agg('["' || p.id || '"]', ',') || ']' FROM picked p)
