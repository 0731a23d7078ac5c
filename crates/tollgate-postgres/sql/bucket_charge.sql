-- A charge of $7 (0 < $7 <= burst) against one limit of the bucket family
-- ($3: 4 token bucket, 5 GCRA, 6 leaky meter; $4 limit, $5 period_ns,
-- $6 burst) for key $1 under policy $2, at $8 (NULL: the database clock),
-- keeping a written row at least $9 ns past the database clock (0: no
-- floor), for a caller whose deadline is $10 on the database clock (NULL:
-- none). One UPDATE, like a hand-written limiter's: it returns what `_apply`
-- would for an admitted charge, or no row when the key has no row yet or
-- the charge is not admitted; the caller then asks `_apply_within`, which
-- decides (and explains a denial) under the row lock.
--
-- The placeholders are expressions src/schema.rs spells out (the planner
-- would not inline SQL functions given arguments this costly, and would run
-- them as queries of their own): NOW is the decision's time, the
-- statement's start (STMT, the same in the WHERE and the SET) or the key's
-- last time if that is later (a write this statement waited for), so each
-- key's times stay in order as in `_apply`; DEBT the key's debt then, in
-- ticks, as `_bucket_family` computes it from [tokens | tat | level, last];
-- CHARGED the debt after the charge; STORED the debt the written state
-- holds; CAP the capacity in ticks. All arithmetic is `numeric`, exact for
-- every quota and a small part of this statement's cost (PL/pgSQL's
-- per-transaction set-up of its statements and expressions was the large
-- one).
UPDATE @T@ AS r
SET state = ARRAY[CASE $3::bigint
                      WHEN 4 THEN @CAP@ - @CHARGED@
                      WHEN 5 THEN @NOW@ * $4::bigint + @CHARGED@
                      ELSE @CHARGED@ END,
                  @NOW@],
    -- Rounded up to a whole minute (`_apply` rounds to a second), and never
    -- lowered: a key charged more than once a minute keeps its idle_at, and
    -- so every index entry, as it is, and the update is HOT (in place, no
    -- new index entries). The row is deleted up to a minute later instead.
    idle_at = greatest(r.idle_at, least(
        div(greatest(@NOW@ + @T@_ns_ceil(@CHARGED@, $4::bigint),
                     CASE WHEN $9::bigint > 0 THEN @STMT@::numeric + $9::bigint ELSE 0 END)
            + 59999999999, 60000000000) * 60000000000,
        9223372036854775807)::bigint)
WHERE r.key = $1::text AND r.policy = $2::bigint
  AND @CHARGED@ <= @CAP@
  AND CASE WHEN $8::bigint IS NULL AND @STMT@ > $10::bigint
           THEN @T@_late(@STMT@ - $10::bigint) ELSE true END
RETURNING ARRAY[1, $7::bigint, 1, @T@_units(@CAP@ - @STORED@, $5::bigint), 0,
                @T@_ns_ceil(@STORED@, $4::bigint), 0]
