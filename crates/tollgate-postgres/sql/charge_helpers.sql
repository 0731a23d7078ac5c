-- Version 3: the helpers of the one-statement charge (`bucket_charge.sql`),
-- which admits a charge against a single token bucket, GCRA or leaky meter
-- (the common policy) with one plain UPDATE, prepared and planned once per
-- connection, instead of PL/pgSQL (whose statements and expressions, set up
-- again in every transaction, cost more than the decision itself).
-- Everything else, and any charge that UPDATE does not admit, still goes
-- to `_apply_within`.

-- Raised by a statement that starts `late` ns past its caller's deadline,
-- as `_apply_within` does, before it changes anything.
-- (The statement of later versions of tollgate-postgres returns no row
-- instead and leaves the error to `_apply_within`: this stays for clients
-- of version 3 sharing the schema.)
CREATE OR REPLACE FUNCTION @T@_late(late bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the call started % ns past its deadline, when its caller had '
        'given up; nothing was charged', late
        USING ERRCODE = 'query_canceled';
END
$$;
