-- tollgate-postgres, schema version 1: the state table and the functions
-- that decide. Installed by src/schema.rs, which replaces @S@ with the schema
-- name, @T@ with the qualified table name and @N@ with the bare table name
-- (both checked to be plain lower-case identifiers), under an advisory lock.
--
-- Exactness. Every rate computation is the core's (crates/tollgate-core):
-- ticks of 1/limit ns, done here in `numeric`, which is exact for integers
-- of any size, so no quota needs refusing and no duration is rounded. Times
-- are `bigint` nanoseconds (below 2^63, the year 2262). The database clock
-- (clock_timestamp(), read after the row lock) has microsecond resolution.
--
-- One row per (key, policy) holds the state of all the policy's limits, so a
-- single row lock makes a decision atomic across them:
--   state  numeric[]  per limit, in policy order: fixed_window [count, last],
--                     sliding_counter [prev, curr, last], token_bucket
--                     [tokens, last], gcra [tat, last], leaky_bucket [level,
--                     last], leaky_queue [next_free, last], sliding_log [last]
--                     (ticks for the buckets and the queue; an empty segment
--                     is a fresh key)
--   log    bigint[]   per sliding_log limit: [n, at_1..at_n, cum_1..cum_n],
--                     one entry per distinct admitted instant (requests at
--                     the same nanosecond share it), cum the running total of
--                     costs from the oldest entry, rebased on every charge
--   idle_at bigint    database time (ns) from which the row, left alone, is
--                     back to a fresh key's state, rounded up to a whole
--                     second: the cleanup's index. Rounded so that most
--                     charges leave it, and so every index, unchanged: the
--                     update is then HOT (in place in the page, no new index
--                     entries), which the table's fill factor leaves room for
CREATE SCHEMA IF NOT EXISTS @S@;

CREATE TABLE IF NOT EXISTS @T@ (
    key text NOT NULL,
    policy bigint NOT NULL,
    state numeric[] NOT NULL,
    log bigint[],
    idle_at bigint NOT NULL,
    PRIMARY KEY (key, policy)
) WITH (fillfactor = 80);

CREATE INDEX IF NOT EXISTS @N@_idle_at ON @T@ (idle_at);

-- The database clock in ns: microseconds (extract returns an exact numeric).
CREATE OR REPLACE FUNCTION @T@_clock_ns() RETURNS bigint
LANGUAGE sql VOLATILE AS $$
    SELECT (extract(epoch FROM clock_timestamp()) * 1000000000)::bigint
$$;

-- `ticks` (1/limit ns) as ns, rounded up, saturated at 2^64 - 1 like the core.
CREATE OR REPLACE FUNCTION @T@_ns_ceil(ticks numeric, l numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN ticks <= 0 THEN 0
                ELSE least(div(ticks - 1, l) + 1, 18446744073709551615) END
$$;

-- Whole cost units in `ticks` (T = p ticks), rounded down, saturated.
CREATE OR REPLACE FUNCTION @T@_units(ticks numeric, p numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE AS $$
    SELECT least(div(greatest(ticks, 0), p), 18446744073709551615)
$$;

-- A debt after a forced charge, capped at 2^120 ticks like the core's
-- (every wait has saturated long before).
CREATE OR REPLACE FUNCTION @T@_forced(debt numeric, cost numeric, p numeric) RETURNS numeric
LANGUAGE sql IMMUTABLE AS $$
    SELECT least(debt + cost * p, 1329227995784915872903807060280344576)
$$;

-- Each algorithm: (op, its state segment, its log segment, limit, period,
-- burst, now, cost) -> (decision, next state, next log).
--   op 0  decide a charge of `cost`: `d` is the decision, `nxt`/`nlg` the
--         state after charging it (the caller keeps it only if admitted)
--   op 1  refund `cost`: `nxt`/`nlg` only
--   op 2  force a charge of `cost` whatever the state: `nxt`/`nlg` only
-- d = [allowed (0/1), remaining, retry_after (-1: never), reset_after, delay,
-- the key's own now]. Durations in ns.

CREATE OR REPLACE FUNCTION @T@_fixed_window(
    op smallint, s numeric[], lg bigint[], l numeric, p numeric, b numeric,
    t_in bigint, cost numeric, OUT d numeric[], OUT nxt numeric[], OUT nlg bigint[])
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    last numeric := coalesce(s[2], 0);
    t numeric := greatest(t_in, last);
    count numeric := CASE WHEN div(t, p) = div(last, p) THEN coalesce(s[1], 0) ELSE 0 END;
    to_end numeric := p - mod(t, p);
    c numeric := count;
BEGIN
    IF op = 1 THEN
        nxt := ARRAY[greatest(count - cost, 0), t];
        RETURN;
    ELSIF op = 2 THEN
        nxt := ARRAY[least(count + cost, 18446744073709551615), t];
        RETURN;
    END IF;
    IF cost > l THEN
        d := ARRAY[0, 0, -1];
    ELSIF cost <= l - count OR cost = 0 THEN
        c := count + cost;
        d := ARRAY[1, 0, 0];
        nxt := ARRAY[c, t];
    ELSE
        d := ARRAY[0, 0, to_end];
    END IF;
    d := ARRAY[d[1], greatest(l - c, 0), d[3], CASE WHEN c > 0 THEN to_end ELSE 0 END, 0, t];
END
$$;

CREATE OR REPLACE FUNCTION @T@_sliding_counter(
    op smallint, s numeric[], lg bigint[], l numeric, p numeric, b numeric,
    t_in bigint, cost numeric, OUT d numeric[], OUT nxt numeric[], OUT nlg bigint[])
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    last numeric := coalesce(s[3], 0);
    t numeric := greatest(t_in, last);
    gap numeric := div(t, p) - div(last, p);
    prev numeric := CASE gap WHEN 0 THEN coalesce(s[1], 0) WHEN 1 THEN coalesce(s[2], 0) ELSE 0 END;
    curr numeric := CASE gap WHEN 0 THEN coalesce(s[2], 0) ELSE 0 END;
    -- The previous window's weight: its ns still inside the trailing period.
    weight numeric := p - mod(t, p);
    room numeric := greatest(l * p - prev * weight, 0);
    c numeric := curr;
    x numeric;
BEGIN
    IF op = 1 THEN
        -- The newest charges first: the current window, then the previous.
        x := least(curr, cost);
        nxt := ARRAY[greatest(prev - (cost - x), 0), curr - x, t];
        RETURN;
    ELSIF op = 2 THEN
        nxt := ARRAY[prev, least(curr + cost, 18446744073709551615), t];
        RETURN;
    END IF;
    IF cost > l THEN
        d := ARRAY[0, 0, -1];
    ELSIF (curr + cost) * p <= room OR cost = 0 THEN
        c := curr + cost;
        d := ARRAY[1, 0, 0];
        nxt := ARRAY[prev, c, t];
    ELSE
        -- The exact wait: while the previous window's weight shrinks in this
        -- window if that is enough, else in the next one, where this
        -- window's count becomes the previous one (the core's retry_after).
        x := NULL;
        IF curr + cost <= l THEN
            x := CASE WHEN prev = 0 THEN weight
                      ELSE least(div((l - curr - cost) * p, prev), weight) END;
            x := CASE WHEN x >= 1 AND x < weight THEN weight - x END;
        END IF;
        IF x IS NULL THEN
            x := weight + p - CASE WHEN curr = 0 THEN p
                                   ELSE least(div((l - cost) * p, curr), p) END;
        END IF;
        d := ARRAY[0, 0, x];
    END IF;
    d := ARRAY[d[1], greatest(@T@_units(room, p) - c, 0), d[3],
               CASE WHEN c > 0 THEN weight + p WHEN prev > 0 THEN weight ELSE 0 END, 0, t];
END
$$;

-- The token bucket, GCRA and the leaky meter share this: a key is its debt
-- (capacity in use, in ticks) and a charge adds cost * T to it.
CREATE OR REPLACE FUNCTION @T@_bucket(
    debt numeric, l numeric, p numeric, b numeric, t numeric, cost numeric,
    OUT d numeric[], OUT after numeric)
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    cap numeric := b * p;
BEGIN
    after := debt;
    IF cost > b THEN
        d := ARRAY[0, -1];
    ELSIF debt + cost * p <= cap OR cost = 0 THEN
        after := debt + cost * p;
        d := ARRAY[1, 0];
    ELSE
        d := ARRAY[0, @T@_ns_ceil(debt + cost * p - cap, l)];
    END IF;
    d := ARRAY[d[1], @T@_units(cap - after, p), d[2], @T@_ns_ceil(after, l), 0, t];
END
$$;

-- The token bucket (4), GCRA (5) and the leaky meter (6): each reduces the
-- key to its debt and stores it its own way: the tokens left (below 0 after
-- a forced charge), the TAT, or the level.
CREATE OR REPLACE FUNCTION @T@_bucket_family(
    alg int, op smallint, s numeric[], l numeric, p numeric, b numeric,
    t_in bigint, cost numeric, OUT d numeric[], OUT nxt numeric[])
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    cap numeric := b * p;
    last numeric := coalesce(s[2], 0);
    t numeric := greatest(t_in, last);
    debt numeric := CASE alg
        WHEN 4 THEN cap - least(cap, coalesce(s[1], cap) + (t - last) * l)
        WHEN 5 THEN greatest(coalesce(s[1], 0) - t * l, 0)
        ELSE greatest(coalesce(s[1], 0) - (t - last) * l, 0) END;
    after numeric;
BEGIN
    IF op = 1 THEN
        after := greatest(debt - cost * p, 0);
    ELSIF op = 2 THEN
        after := @T@_forced(debt, cost, p);
    ELSE
        SELECT * INTO d, after FROM @T@_bucket(debt, l, p, b, t, cost);
    END IF;
    nxt := ARRAY[CASE alg WHEN 4 THEN cap - after WHEN 5 THEN t * l + after ELSE after END, t];
END
$$;

-- The queue: the wait until the drain is free; one request is served at
-- once and `burst` more wait, released one interval T apart.
CREATE OR REPLACE FUNCTION @T@_leaky_queue(
    op smallint, s numeric[], lg bigint[], l numeric, p numeric, b numeric,
    t_in bigint, cost numeric, OUT d numeric[], OUT nxt numeric[], OUT nlg bigint[])
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    t numeric := greatest(t_in, coalesce(s[2], 0));
    at numeric := t * l;
    wait numeric := greatest(coalesce(s[1], 0) - at, 0);
    cap numeric := b * p;
    w numeric := wait;
    delay numeric := 0;
BEGIN
    IF op = 1 THEN
        nxt := ARRAY[at + greatest(wait - cost * p, 0), t];
        RETURN;
    ELSIF op = 2 THEN
        nxt := ARRAY[at + @T@_forced(wait, cost, p), t];
        RETURN;
    END IF;
    IF cost = 0 THEN
        d := ARRAY[1, 0];
    ELSIF cost - 1 > b THEN
        d := ARRAY[0, -1];
    ELSIF wait + (cost - 1) * p <= cap THEN
        w := wait + cost * p;
        delay := @T@_ns_ceil(wait, l);
        d := ARRAY[1, 0];
        nxt := ARRAY[at + w, t];
    ELSE
        d := ARRAY[0, @T@_ns_ceil(wait + (cost - 1) * p - cap, l)];
    END IF;
    d := ARRAY[d[1], @T@_units(cap + p - w, p), d[2], @T@_ns_ceil(w, l), delay, t];
END
$$;

-- The log: entries (at, cum) sorted by time; `live` entries at or before
-- now - period have left the window. Searches are binary (bigint arrays
-- index in O(1)); a charge rewrites the live entries.
CREATE OR REPLACE FUNCTION @T@_sliding_log(
    op smallint, s numeric[], lg bigint[], l numeric, p numeric, b numeric,
    t_in bigint, cost numeric, OUT d numeric[], OUT nxt numeric[], OUT nlg bigint[])
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    t bigint := greatest(t_in, coalesce(s[1], 0));
    n int := coalesce(lg[1], 0);
    live int := 0;
    lo int;
    hi int;
    mid int;
    start numeric;
    total numeric;
    newest numeric;
    ats bigint[];
    cums bigint[];
    m int;
    c numeric;
    charged numeric;
BEGIN
    -- Entries are lg[1 + i] (time) and lg[1 + n + i] (running total), i = 1..n.
    IF t >= p THEN
        lo := 0;
        hi := n;
        WHILE lo < hi LOOP
            mid := (lo + hi + 1) / 2;
            IF lg[1 + mid] <= t - p THEN lo := mid; ELSE hi := mid - 1; END IF;
        END LOOP;
        live := lo;
    END IF;
    start := CASE WHEN live = 0 THEN 0 ELSE lg[1 + n + live] END;
    total := CASE WHEN n = 0 THEN 0 ELSE lg[1 + 2 * n] END;
    newest := CASE WHEN n = 0 THEN NULL ELSE lg[1 + n] END;

    IF op = 1 THEN
        -- Takes the cost back from the newest entries.
        ats := lg[2 : 1 + n];
        cums := lg[2 + n : 1 + 2 * n];
        m := n;
        c := cost;
        WHILE c > 0 AND m > 0 LOOP
            charged := cums[m] - CASE WHEN m = 1 THEN 0 ELSE cums[m - 1] END;
            IF charged > c THEN
                cums[m] := cums[m] - c;
                c := 0;
            ELSE
                m := m - 1;
                c := c - charged;
            END IF;
        END LOOP;
        nxt := ARRAY[t];
        nlg := ARRAY[m::bigint] || ats[1 : m] || cums[1 : m];
        RETURN;
    END IF;

    IF op = 0 THEN
        IF cost > l THEN
            d := ARRAY[0, greatest(l - (total - start), 0), -1];
        ELSIF cost <= greatest(l - (total - start), 0) THEN
            d := ARRAY[1, greatest(l - (total - start) - cost, 0), 0];
            IF cost > 0 THEN newest := t; END IF;
            total := total + cost;
        ELSE
            -- The oldest live entries must leave until `excess` cost has gone.
            c := total - start + cost - l;
            lo := live + 1;
            hi := n;
            WHILE lo < hi LOOP
                mid := (lo + hi) / 2;
                IF lg[1 + n + mid] - start >= c THEN hi := mid; ELSE lo := mid + 1; END IF;
            END LOOP;
            d := ARRAY[0, greatest(l - (total - start), 0), lg[1 + lo] + p - t];
        END IF;
        d := ARRAY[d[1], d[2], d[3],
                   CASE WHEN newest IS NOT NULL AND total - start > 0 THEN newest + p - t ELSE 0 END,
                   0, t];
        IF d[1] = 0 OR cost = 0 THEN
            RETURN;
        END IF;
    END IF;

    IF op = 2 AND total - start + cost > 9223372036854775807 THEN
        -- The live sum is a bigint; refused before anything changes.
        RAISE EXCEPTION USING ERRCODE = 'numeric_value_out_of_range',
            MESSAGE = format('a forced charge of %s would take the sliding log past '
                             '2^63 - 1 units in one period', cost);
    END IF;
    -- A charge (admitted or forced): drop what has left, rebase, append.
    ats := lg[2 + live : 1 + n];
    cums := ARRAY(SELECT v - start FROM unnest(lg[2 + n + live : 1 + 2 * n])
                  WITH ORDINALITY AS u(v, i) ORDER BY i);
    m := n - live;
    c := CASE WHEN m = 0 THEN 0 ELSE cums[m] END + cost;
    IF m > 0 AND ats[m] = t THEN
        cums[m] := c;
    ELSE
        ats := ats || t;
        cums := cums || c::bigint;
        m := m + 1;
    END IF;
    nxt := ARRAY[t];
    nlg := ARRAY[m::bigint] || ats || cums;
END
$$;

-- Algorithm codes are the order of tollgate_core::Algorithm::ALL, from 1.
CREATE OR REPLACE FUNCTION @T@_step(
    alg int, op smallint, s numeric[], lg bigint[], l numeric, p numeric, b numeric,
    t bigint, cost numeric, OUT d numeric[], OUT nxt numeric[], OUT nlg bigint[])
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    CASE alg
        WHEN 1 THEN SELECT * INTO d, nxt, nlg FROM @T@_fixed_window(op, s, lg, l, p, b, t, cost);
        WHEN 2 THEN SELECT * INTO d, nxt, nlg FROM @T@_sliding_log(op, s, lg, l, p, b, t, cost);
        WHEN 3 THEN SELECT * INTO d, nxt, nlg FROM @T@_sliding_counter(op, s, lg, l, p, b, t, cost);
        WHEN 4, 5, 6 THEN SELECT * INTO d, nxt FROM @T@_bucket_family(alg, op, s, l, p, b, t, cost);
        WHEN 7 THEN SELECT * INTO d, nxt, nlg FROM @T@_leaky_queue(op, s, lg, l, p, b, t, cost);
    END CASE;
END
$$;

-- Every operation on one key, under its row lock, in one statement:
--   p_op 0 check (cost 0 peeks), 1 refund, 2 force, 3 lease (p_cost = max)
--   p_limits [algorithm, limit, period_ns, burst] per limit
--   p_now    the request time in ns, or NULL for the database clock
--   p_floor  if > 0, least ns a written row is kept past the database
--            clock (for replays, whose times are not the database's)
-- Returns [all allowed (0/1), cost charged (a check's when admitted, a
-- forced one, the lease's grant; 0 for a refund), then per
-- limit: allowed, remaining, retry_after (-1 never), reset_after, delay].
CREATE OR REPLACE FUNCTION @T@_apply(
    p_key text, p_policy bigint, p_limits bigint[], p_op smallint, p_cost numeric,
    p_now bigint, p_floor bigint)
RETURNS numeric[]
LANGUAGE plpgsql AS $$
DECLARE
    n int := array_length(p_limits, 1) / 4;
    st numeric[];
    lg bigint[];
    found_row boolean;
    db_now bigint;
    t bigint;
    op smallint;
    cost numeric;
    k numeric;
    i int;
    alg int;
    slen int;
    llen int;
    so int;
    lo int;
    seg numeric[];
    lseg bigint[];
    d numeric[];
    nxt numeric[];
    nlg bigint[];
    out numeric[];
    new_st numeric[];
    new_lg bigint[];
    all_ok boolean;
    idle numeric;
BEGIN
    LOOP
        IF p_op = 0 AND p_cost = 0 THEN
            -- A peek changes nothing: a consistent snapshot is enough.
            SELECT state, log INTO st, lg FROM @T@ WHERE key = p_key AND policy = p_policy;
        ELSE
            SELECT state, log INTO st, lg FROM @T@ WHERE key = p_key AND policy = p_policy
                FOR UPDATE;
        END IF;
        found_row := FOUND;
        -- Read after the lock: each key sees its times in order.
        db_now := @T@_clock_ns();
        t := coalesce(p_now, db_now);
        op := p_op;
        cost := p_cost;
        IF NOT found_row THEN
            st := '{}';
            lg := '{}';
        END IF;
        -- Two passes for a lease (the grant every limit admits, then its
        -- charge); one otherwise.
        FOR pass IN (CASE WHEN p_op = 3 THEN 1 ELSE 2 END) .. 2 LOOP
            IF pass = 1 THEN
                op := 0;
                cost := 0;
            ELSIF p_op = 3 THEN
                -- Nothing fits: the decision on one unit says when to come
                -- back (a peek for a lease of 0), and charges nothing.
                cost := least(p_cost, k);
                IF cost = 0 THEN
                    cost := least(p_cost, 1);
                END IF;
            END IF;
            out := ARRAY[1, 0];
            new_st := '{}';
            new_lg := '{}';
            all_ok := true;
            idle := 0;
            so := 1;
            lo := 1;
            FOR i IN 1 .. n LOOP
                alg := p_limits[4 * i - 3];
                slen := CASE alg WHEN 1 THEN 2 WHEN 2 THEN 1 WHEN 3 THEN 3 ELSE 2 END;
                seg := st[so : so + slen - 1];
                so := so + slen;
                lseg := NULL;
                IF alg = 2 THEN
                    llen := 1 + 2 * coalesce(lg[lo], 0);
                    lseg := lg[lo : lo + llen - 1];
                    lo := lo + llen;
                END IF;
                -- Refunding or forcing nothing changes nothing: a peek.
                SELECT * INTO d, nxt, nlg FROM @T@_step(alg,
                    CASE WHEN cost = 0 THEN 0 ELSE op END::smallint, seg, lseg,
                    p_limits[4 * i - 2], p_limits[4 * i - 1], p_limits[4 * i], t, cost);
                IF op <> 0 AND cost > 0 THEN
                    -- Refund and force report the key's numbers right after.
                    SELECT s.d INTO d FROM @T@_step(alg, 0::smallint, nxt, nlg,
                        p_limits[4 * i - 2], p_limits[4 * i - 1], p_limits[4 * i], t, 0) s;
                END IF;
                IF pass = 1 THEN
                    k := CASE WHEN i = 1 THEN d[2] ELSE least(k, d[2]) END;
                END IF;
                all_ok := all_ok AND d[1] = 1;
                out := out || d[1 : 5];
                new_st := new_st || nxt;
                new_lg := new_lg || nlg;
                idle := greatest(idle, d[6] + d[4]);
            END LOOP;
        END LOOP;
        out[1] := CASE WHEN all_ok THEN 1 ELSE 0 END;
        out[2] := CASE WHEN p_op = 1 THEN 0 WHEN all_ok OR op <> 0 THEN cost ELSE 0 END;
        IF cost = 0 OR (op = 0 AND NOT all_ok) THEN
            RETURN out;
        END IF;
        IF p_floor > 0 THEN
            idle := greatest(idle, db_now + p_floor);
        END IF;
        idle := least(div(idle + 999999999, 1000000000) * 1000000000, 9223372036854775807);
        IF found_row THEN
            UPDATE @T@ SET state = new_st, log = nullif(new_lg, '{}'), idle_at = idle
                WHERE key = p_key AND policy = p_policy;
            RETURN out;
        END IF;
        INSERT INTO @T@ (key, policy, state, log, idle_at)
            VALUES (p_key, p_policy, new_st, nullif(new_lg, '{}'), idle)
            ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN out;
        END IF;
        -- Another session created the row first: decide again under its lock.
    END LOOP;
END
$$;

-- Deletes at most `p_batch` rows that are back to a fresh key's state by
-- `p_now` (default: the database clock), oldest first through the idle_at
-- index. Row locks only, skipping rows in use: never blocks a decision.
CREATE OR REPLACE FUNCTION @T@_cleanup(p_batch int, p_now bigint DEFAULT NULL)
RETURNS bigint
LANGUAGE sql AS $$
    WITH cutoff AS (SELECT coalesce(p_now, @T@_clock_ns()) AS t),
    victims AS (
        SELECT key, policy FROM @T@
        WHERE idle_at <= (SELECT t FROM cutoff)
        ORDER BY idle_at
        LIMIT p_batch
        FOR UPDATE SKIP LOCKED
    ),
    gone AS (
        DELETE FROM @T@ AS r USING victims v
        WHERE r.key = v.key AND r.policy = v.policy AND r.idle_at <= (SELECT t FROM cutoff)
        RETURNING 1
    )
    SELECT count(*) FROM gone
$$;
