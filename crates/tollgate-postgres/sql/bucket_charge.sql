-- A charge of $6 (0 < $6 <= burst) against one limit of the bucket family
-- ($3 limit, $4 period_ns, $5 burst) for key $1 under policy $2, at $7
-- (NULL: the database clock), keeping a written row at least $8 ns past
-- that time (0: no floor), for a caller whose deadline is $9 on the
-- database clock (NULL only with $7). One UPDATE, like a hand-written
-- limiter's: it returns the key's state after an admitted charge (the
-- client derives the numbers `_apply` would return from it), or no row
-- when the key has no row yet, the charge is not admitted or the statement
-- started past the deadline; the caller then asks `_apply_within`, which
-- decides (and explains a denial) under the row lock, or raises the
-- deadline's error.
--
-- The server sets up every expression of a prepared statement again at
-- each execution, and each operator or cast costs a catalog lookup and a
-- permission check there: so the statement holds as few as it can. The
-- values that do not depend on the row (its start on the database clock,
-- or $7; the capacity and the cost in ticks) are computed once, in `c`
-- (OFFSET 0 keeps the planner from copying them into every use). The
-- placeholders are expressions src/schema.rs spells out per algorithm:
-- NOW the decision's time, the statement's start or the key's last time
-- if that is later (a write this statement waited for), so each key's
-- times stay in order as in `_apply`; ADMITTED whether the debt after the
-- charge, as `_bucket_family` computes it, fits the capacity (the cost
-- alone always does: $6 <= burst); CHARGED the state's first number after
-- the charge; IDLE when, left alone, the key is back to a fresh one's state
-- (its debt drained, rounded up to a ns). Row values are re-read if a
-- concurrent write moved the row, so all of them are written in terms of
-- `r`. All arithmetic is `numeric`, exact for every quota. Durations need
-- no saturation: the debt is at most the capacity, whose drain time
-- (burst * period / limit) the core keeps below 2^62 ns.
UPDATE @T@ AS r
SET state = ARRAY[@CHARGED@, @NOW@],
    -- Rounded up to a whole minute (`_apply` rounds to a second), and never
    -- lowered: a key charged more than once a minute keeps its idle_at, and
    -- so every index entry, as it is, and the update is HOT (in place, no
    -- new index entries). The row is deleted up to a minute later instead.
    -- The floor needs no test of $8 > 0: c.start is at most IDLE.
    idle_at = greatest(r.idle_at, least(
        div(greatest(@IDLE@, c.start + $8::bigint) + 59999999999, 60000000000)
            * 60000000000,
        9223372036854775807)::bigint)
FROM (SELECT coalesce($7::bigint,
                      (extract(epoch FROM statement_timestamp()) * 1000000000)::bigint
             )::numeric AS start,
             $5::numeric * $4::numeric AS cap,
             $6::numeric * $4::numeric AS cost
      OFFSET 0) AS c
WHERE r.key = $1::text AND r.policy = $2::bigint
  AND @ADMITTED@
  -- Started past the caller's deadline: no row, and `_apply_within`, which
  -- the caller (if still waiting) asks next, raises the error.
  AND ($7::bigint IS NOT NULL OR c.start <= $9::bigint)
RETURNING r.state
