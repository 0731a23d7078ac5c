-- Version 2: a call may carry its deadline on the database clock. A statement
-- that starts after it (it waited in a paused or overloaded server while its
-- caller gave up) changes nothing; statement_timeout bounds the rest, which
-- counts only from the statement's start.
CREATE OR REPLACE FUNCTION @T@_apply_within(
    p_key text, p_policy bigint, p_limits bigint[], p_op smallint, p_cost numeric,
    p_now bigint, p_floor bigint, p_deadline bigint)
RETURNS numeric[]
LANGUAGE plpgsql AS $$
DECLARE
    late bigint;
BEGIN
    IF p_now IS NULL AND p_deadline IS NOT NULL THEN
        late := @T@_clock_ns() - p_deadline;
        IF late > 0 THEN
            RAISE EXCEPTION 'the call started % ns past its deadline, when its caller had '
                'given up; nothing was charged', late
                USING ERRCODE = 'query_canceled';
        END IF;
    END IF;
    RETURN @T@_apply(p_key, p_policy, p_limits, p_op, p_cost, p_now, p_floor);
END
$$;
