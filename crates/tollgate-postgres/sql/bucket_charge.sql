-- A charge of $3 ticks (0 < $3 <= the capacity) against one limit of the
-- bucket family for key $1 under policy $2. One UPDATE, like a hand-written
-- limiter's: it returns the key's state after an admitted charge (the
-- client derives the numbers `_apply` would return from it), or no row
-- when the key has no row yet, the charge is not admitted or (on the
-- database clock) the statement started past its caller's deadline; the
-- caller then asks `_apply_within`, which decides (and explains a denial)
-- under the row lock, or raises the deadline's error.
--
-- The server sets up every expression of a prepared statement again at
-- each execution, and each operator or cast costs a catalog lookup and a
-- permission check there, each parameter a parse: so the statement holds
-- as few as it can. The policy's numbers are literals (src/schema.rs writes
-- one statement per policy, folded when it is planned): the limit, the
-- capacity in ticks, and how far past the charge's time the row is kept
-- (plus a minute less a ns, for the rounding up). The placeholders are
-- expressions src/schema.rs spells out: START the statement's time, on the
-- database clock its start, computed once in `c` (OFFSET 0 keeps the
-- planner from copying it into every use), or else $4; FROM that
-- sub-query, if any; CHARGED the state's first number after the charge;
-- ADMITTED whether the debt after it, as `_bucket_family` computes it, fits
-- the capacity (the cost alone always does).
--
-- The decision's time is the later of START and the key's last time (a
-- write this statement waited for), so each key's times stay in order as
-- in `_apply`. Row values are re-read if a concurrent write moved the row,
-- so all of them are written in terms of `r`. All arithmetic on the state
-- is `numeric`, exact for every quota.
UPDATE @T@ AS r
SET state = ARRAY[@CHARGED@, greatest(@START@, r.state[2])],
    -- Rounded up to a whole minute (`_apply` rounds to a second), never
    -- lowered, and from the capacity's drain time rather than the debt's
    -- (the debt after an admitted charge is at most the capacity): the row
    -- is deleted up to that and a minute later than `_apply` would, and a
    -- key charged more than once a minute keeps its idle_at, and so every
    -- index entry, as it is: the update is HOT (in place, no new index
    -- entries). One addition instead of the debt's drain spelled out again.
    idle_at = greatest(r.idle_at, least(
        div(greatest(@START@, r.state[2]) + @AHEAD@, 60000000000) * 60000000000,
        9223372036854775807)::bigint)
@FROM@
WHERE r.key = $1::text AND r.policy = $2::bigint AND @ADMITTED@
RETURNING r.state
