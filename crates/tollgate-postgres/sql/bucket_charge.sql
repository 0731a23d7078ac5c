-- A charge of $6 (0 < $6 <= burst) against one limit of the bucket family
-- ($3 limit, $4 period_ns, $5 burst) for key $1 under policy $2, at $7
-- (NULL: the database clock), keeping a written row at least $8 ns past the
-- database clock (0: no floor), for a caller whose deadline is $9 on the
-- database clock (NULL: none). One UPDATE, like a hand-written limiter's:
-- it returns what `_apply` would for an admitted charge, or no row when the
-- key has no row yet or the charge is not admitted; the caller then asks
-- `_apply_within`, which decides (and explains a denial) under the row lock.
--
-- The placeholders are expressions src/schema.rs spells out for each
-- algorithm, so the statement holds only its own (a SQL function given
-- arguments this costly would not be inlined, and would run as a query of
-- its own). START is the statement's start on the database clock (or $7),
-- computed once; NOW the decision's time, START or the key's last time if
-- that is later (a write this statement waited for), so each key's times
-- stay in order as in `_apply`; DEBT the key's debt then, in ticks, as
-- `_bucket_family` computes it; COST the charge in ticks; CHARGED_STATE
-- the state holding the debt after it; STORED the debt the written state
-- holds; CAP the capacity in ticks. All arithmetic is `numeric`, exact for
-- every quota. Durations need no saturation here: the debt is at most CAP,
-- whose drain time (burst * period / limit) the core keeps below 2^62 ns.
UPDATE @T@ AS r
SET state = ARRAY[@CHARGED_STATE@, @NOW@],
    -- Rounded up to a whole minute (`_apply` rounds to a second), and never
    -- lowered: a key charged more than once a minute keeps its idle_at, and
    -- so every index entry, as it is, and the update is HOT (in place, no
    -- new index entries). The row is deleted up to a minute later instead.
    idle_at = greatest(r.idle_at, least(
        div(greatest(@NOW@ + div((@DEBT@ + @COST@) - 1, $3::bigint) + 1,
                     CASE WHEN $8::bigint > 0 THEN @START@ + $8::bigint ELSE 0 END)
            + 59999999999, 60000000000) * 60000000000,
        9223372036854775807)::bigint)
WHERE r.key = $1::text AND r.policy = $2::bigint
  AND (@DEBT@ + @COST@) <= @CAP@
  AND CASE WHEN $7::bigint IS NULL AND @START@ > $9::bigint
           THEN @T@_late((@START@ - $9::bigint)::bigint) ELSE true END
RETURNING ARRAY[1, $6::bigint, 1, div(@CAP@ - @STORED@, $4::bigint), 0,
                div(@STORED@ - 1, $3::bigint) + 1, 0]
