#!lua name=tollgate
--[[
tollgate: the seven rate-limiting algorithms as one Redis Function,
`tollgate_v4`, with every operation on a key: a decision, a refund, a
forced charge and a lease. The same file runs through EVALSHA on servers
without Functions (the Rust side wraps it, see src/script.rs). The name
carries the version of the arguments, so a server holding an older library
reports the function missing and the client loads this one.

FCALL tollgate_v4 <nkeys> <keys...> <now_us> <ttl_floor_ms> <op> <amount> <n>
      then per limit: <algorithm> <cap> <x> <y> <max>
      then, optionally: <deadline_us>
FCALL_RO tollgate_v4_peek ... the same arguments, for a check of cost 0
FCALL tollgate_v4_fold <nkeys> <every call's keys>
      <p> then per policy: <n> then per limit <algorithm> <cap> <x> <y> <max>
      <m> then per call: <its nkeys> <its policy, 1 to p> <now_us>
                         <ttl_floor_ms> <op> <amount> <deadline_us>
      m calls of tollgate_v4 in one, each policy sent and read once, run in
      order at one TIME; returns their m replies in order, each an error or
      its integers packed as little-endian doubles in one string
(`tollgate_v3`, `tollgate_v2` and their `_peek` twins, the names of the
previous versions, stay so that their clients keep working during a rolling
upgrade: v2 is v3 without the deadline, and both keep the sliding log of
their time, two sorted sets under other key names, see `sliding_log_v3`.)

  now_us        the request time in microseconds, or "" for the server's TIME
  ttl_floor_ms  the least TTL given to a charged key (0 with the server clock;
                replays of a trace's own times need more, see src/backend.rs)
  op            check  | decide a request of cost `amount` (0 is a peek)
                refund | give `amount` back
                force  | charge `amount` whatever the state
                lease  | charge the largest cost <= `amount` every limit admits
  algorithm     fixed_window | sliding_counter     cap = limit, x/y = a, b
                sliding_log                        cap = limit, x = ceil(period/1us)
                token_bucket | gcra | leaky_bucket cap = burst, x/y = p, q
                leaky_queue                        cap = burst, x/y = p, q
  max           the largest value the key's stored quantity (count, debt,
                running total) may reach; a forced charge beyond it is refused
  deadline_us   the caller's deadline on the server's clock (TIME, in
                microseconds), or "" for none: a call run later (it waited
                in a paused or busy server while the caller gave up) changes
                nothing and fails with TOLLGATE_LATE, so a request refused
                for the store's slowness is never charged afterwards. Only
                with the server's clock (now_us "").
  keys          one per limit, two for sliding_log (the log, the time of its
                last refund); three for v3's (times, running totals, clock)

Returns {all_allowed, charged, then per limit: allowed, remaining, retry_us,
reset_us, delay_us}: `charged` is the cost the call charged (a check's cost
when admitted, the forced cost, the leased cost; 0 for a refund); for a
refund or a forced charge the numbers are the key's after it. retry_us is -1
for "never". Every duration is the exact one of the core rounded up to the
microsecond, the resolution of the store's clock.

Exactness. Lua numbers are doubles: integers are exact below 2^53. The Rust
side (src/exact.rs) reduces each quota to small integer units and refuses a
quota whose largest intermediate value below could exceed 2^53, so every
value computed here is an exact integer:

  windows   the period is a units of g ns (g = gcd(period, 1000)), one
            microsecond is b = 1000/g units; positions in a window are
            fmod(fmod(now, a) * b, a) < a*b.
  buckets   the emission interval T = period/limit is p/q microseconds in
            lowest terms; a debt is kept in ticks of 1/q us, at most
            burst*p (or `max` after forced charges), relative to the last
            charge (never an absolute timestamp, which would need ~70 bits).
  log       times are whole microseconds (< 2^53 until the year 2255).

div_floor and div_ceil use fmod, which is exact in IEEE arithmetic, so the
quotient of two exact integers is exact too.
]]

-- Library globals (math, string) exist only when a function runs, not while
-- the library loads, so they are looked up inside each call.
local function fmod(a, b)
  return math.fmod(a, b)
end

local function div_floor(a, b)
  return (a - fmod(a, b)) / b
end

local function div_ceil(a, b)
  local r = fmod(a, b)
  local q = (a - r) / b
  if r > 0 then
    q = q + 1
  end
  return q
end

-- Integers as Redis arguments: written out in full, never as "1.7e+15".
local function int(x)
  return string.format('%d', x)
end

-- Within a fold, the packed states its calls read and wrote, by key (false
-- for none), and the TTLs of their last writes: each key is read once and
-- written once, at the end, as the calls one after another would have left
-- it. nil outside a fold.
local held, held_ttl = nil, nil

-- A key's state is a few integers packed as doubles (exact, and cheaper to
-- read and write than decimal text); nil for a fresh key.
local function load(key, layout)
  local v = held and held[key]
  if v == nil then
    v = redis.call('GET', key)
    if held then
      held[key] = v
    end
  end
  if not v then
    return nil
  end
  return { struct.unpack(layout, v) }
end

-- TTL of a charged key: its reset_after, at least the caller's floor.
local function ttl_ms(reset_us, floor_ms)
  return math.max(div_ceil(reset_us, 1000), floor_ms, 1)
end

local function save(key, layout, reset_us, floor_ms, ...)
  local v, ttl = struct.pack(layout, ...), ttl_ms(reset_us, floor_ms)
  if held then
    held[key], held_ttl[key] = v, ttl
  else
    redis.call('SET', key, v, 'PX', ttl)
  end
end

-- Gives `alg` (a table of read, judge and change, see below) the `write`
-- of a state packed as `layout` from the numbers `numbers(s, p)` returns,
-- with a TTL of the state's reset_after (`reset` us when the caller knows it).
local function packed(alg, layout, numbers)
  alg.write = function(keys, i, p, s, floor, reset)
    save(keys[i], layout, reset or alg.judge(s, p, 0)[4], floor, numbers(s, p))
  end
  return alg
end

-- Windows: the position of `now` (us) in its window, in units of g ns.
local function offset(now, a, b)
  return fmod(fmod(now, a) * b, a)
end

-- How many window boundaries lie in (last, now], capped at 2.
local function boundaries(last, now, a, b)
  local d = now - last
  if d >= 2 * a then -- d us is d*b >= 2a units, since b >= 1
    return 2
  end
  return math.min(div_floor(d * b + offset(last, a, b), a), 2)
end

-- A debt of `v` ticks (1/q us) after `elapsed` us of draining, floored at 0.
-- The test first keeps elapsed*q below v + q.
local function drained(v, elapsed, q)
  if elapsed >= div_ceil(v, q) then
    return 0
  end
  return v - elapsed * q
end

-- Each algorithm is a table of:
--   keys                       how many Redis keys it uses;
--   read(keys, i, p, now)      the key's state as of `now`, which it clamps to
--                              the key's own clock (field `now`);
--   judge(s, p, cost)          the decision on `cost`, and the state after
--                              charging it when admitted;
--   change(s, p, op, cost)     the state after a refund or a forced charge,
--                              nil if a forced charge would pass `p.max`;
--   write(keys, i, p, s, floor, reset)
--                              stores a state from judge or change, with a
--                              TTL of its reset_after if given (else its own).
-- `p` holds the limit's arguments: cap, x, y, max.
local algorithms = {}

algorithms.fixed_window = packed({
  keys = 1,
  read = function(keys, i, p, now)
    local s = load(keys[i], 'dd') or { 0, 0 }
    local count, last = s[1], s[2]
    if now < last then
      now = last
    end
    if boundaries(last, now, p.x, p.y) > 0 then
      count = 0
    end
    return { count = count, now = now }
  end,
  judge = function(s, p, cost)
    local limit, a, b = p.cap, p.x, p.y
    local to_end = div_ceil(a - offset(s.now, a, b), b)
    local function report(allowed, c, retry)
      local reset = 0
      if c > 0 then
        reset = to_end
      end
      return { allowed, math.max(limit - c, 0), retry, reset, 0 }
    end
    if cost > limit then
      return report(0, s.count, -1)
    end
    if cost <= limit - s.count or cost == 0 then
      local c = s.count + cost
      return report(1, c, 0), { count = c, now = s.now }
    end
    return report(0, s.count, to_end)
  end,
  change = function(s, p, op, cost)
    if op == 'refund' then
      return { count = math.max(s.count - cost, 0), now = s.now }
    end
    if cost > p.max - s.count then
      return nil
    end
    return { count = s.count + cost, now = s.now }
  end,
}, 'dd', function(s)
  return s.count, s.now
end)

-- The wait (units) for a denied cost <= limit: first while the previous
-- window's weight shrinks, else in the next window where this one's count
-- becomes the previous one's.
local function counter_wait(limit, a, prev, curr, cost, weight)
  local function largest_weight(count, spare, cap)
    if count == 0 then
      return cap
    end
    return math.min(div_floor(spare * a, count), cap)
  end
  if curr + cost <= limit then
    local x = largest_weight(prev, limit - curr - cost, weight)
    if x >= 1 and x < weight then
      return weight - x
    end
  end
  return weight + a - largest_weight(curr, limit - cost, a)
end

algorithms.sliding_counter = packed({
  keys = 1,
  read = function(keys, i, p, now)
    local s = load(keys[i], 'ddd') or { 0, 0, 0 }
    local prev, curr, last = s[1], s[2], s[3]
    if now < last then
      now = last
    end
    local crossed = boundaries(last, now, p.x, p.y)
    if crossed == 1 then
      prev, curr = curr, 0
    elseif crossed == 2 then
      prev, curr = 0, 0
    end
    return { prev = prev, curr = curr, now = now }
  end,
  judge = function(s, p, cost)
    local limit, a, b = p.cap, p.x, p.y
    local prev, curr = s.prev, s.curr
    -- The previous window's weight: the units of it still in the trailing period.
    local weight = a - offset(s.now, a, b)
    local room = math.max(limit * a - prev * weight, 0)
    local function report(allowed, c, retry)
      local reset = 0
      if c > 0 then
        reset = div_ceil(weight + a, b)
      elseif prev > 0 then
        reset = div_ceil(weight, b)
      end
      return { allowed, math.max(div_floor(room, a) - c, 0), retry, reset, 0 }
    end
    if cost > limit then
      return report(0, curr, -1)
    end
    if (curr + cost) * a <= room or cost == 0 then
      return report(1, curr + cost, 0), { prev = prev, curr = curr + cost, now = s.now }
    end
    return report(0, curr, div_ceil(counter_wait(limit, a, prev, curr, cost, weight), b))
  end,
  -- A refund takes from the current window first (the newest charges).
  change = function(s, p, op, cost)
    if op == 'refund' then
      local from_curr = math.min(s.curr, cost)
      return { prev = math.max(s.prev - (cost - from_curr), 0), curr = s.curr - from_curr, now = s.now }
    end
    if cost > p.max - s.curr then
      return nil
    end
    return { prev = s.prev, curr = s.curr + cost, now = s.now }
  end,
}, 'ddd', function(s)
  return s.prev, s.curr, s.now
end)

-- Sliding log: one sorted set of admitted requests, scored by time (us),
-- each member the running total of costs through its request, so a
-- request's cost is its total less the previous member's. The total is
-- packed order-preserving (a byte giving its length, then its big-endian
-- bytes: 2 to 6 bytes below 2^40), so members sort like their scores:
-- unique per request even within one microsecond, and a running total is
-- found with ZRANGEBYLEX. (Redis leaves the lexicographic commands
-- unspecified when scores differ, but both of its encodings answer them by
-- walking the set in order, which gives the right answer whenever the
-- member order is the score order, as here.) The newest request that has
-- left the window is kept, as the running total before the live ones; a
-- second key holds the time of the last refund, which moves the key's
-- clock without adding a request. Every lookup is O(log n); pruning is
-- amortised O(1).
local function log_member(total)
  local n = 1
  while total >= 256 ^ n do
    n = n + 1
  end
  return string.char(n) .. struct.pack('>I' .. n, total)
end

local function log_total(member)
  return (struct.unpack('>I' .. (#member - 1), member, 2))
end

-- A sliding log's decision, the same in every layout of the log: `s.total`
-- is the running cost of every request kept, `s.start` that of those that
-- have left the window. `leaves(s, excess)` is the time at which the live
-- requests holding the first `excess` of the window's cost have all left.
local function log_judge(s, p, cost, leaves)
  local limit, span, now = p.cap, p.x, s.now
  local sum = s.total - s.start
  local function report(allowed, used, at, retry)
    local reset = 0
    if used > 0 and at then
      reset = at - now + span
    end
    return { allowed, math.max(limit - used, 0), retry, reset, 0 }
  end
  if cost > limit then
    return report(0, sum, s.newest_at, -1)
  end
  if cost <= limit - sum or cost == 0 then
    if cost == 0 then
      return report(1, sum, s.newest_at, 0), s
    end
    return report(1, sum + cost, now, 0), { base = s, add = cost }
  end
  local at = leaves(s, sum + cost - limit)
  return report(0, sum, s.newest_at, at - now + span)
end

local function log_change(s, p, op, cost)
  if op == 'refund' then
    return { base = s, refund = cost }
  end
  if cost > p.max - s.total then
    return nil
  end
  return { base = s, add = cost }
end

algorithms.sliding_log = {
  keys = 2,
  read = function(keys, i, p, now)
    local log, clock = keys[i], keys[i + 1]
    local newest = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
    local total, newest_at = 0, nil
    if newest[1] then
      total, newest_at = log_total(newest[1]), tonumber(newest[2])
      now = math.max(now, newest_at)
    end
    local moved = redis.call('GET', clock)
    if moved then
      now = math.max(now, tonumber(moved))
    end
    -- An entry at t has left once now >= t + period, i.e. t <= now - span.
    local cutoff = now - p.x
    local gone = redis.call('ZREVRANGEBYSCORE', log, int(cutoff), '-inf', 'LIMIT', 0, 1)[1]
    local start = 0
    if gone then
      start = log_total(gone)
    end
    return {
      log = log, clock = clock, now = now, cutoff = cutoff, gone = gone,
      total = total, start = start, newest_at = newest_at,
    }
  end,
  judge = function(s, p, cost)
    -- The first entry whose running total reaches start + excess.
    return log_judge(s, p, cost, function(s, excess)
      local k = redis.call('ZRANGEBYLEX', s.log, '[' .. log_member(s.start + excess), '+', 'LIMIT', 0, 1)[1]
      return tonumber(redis.call('ZSCORE', s.log, k))
    end)
  end,
  change = log_change,
  write = function(_, _, p, c, floor)
    local s = c.base
    local ttl = int(ttl_ms(p.x, floor))
    if c.add then
      if s.gone then
        redis.call('ZREMRANGEBYLEX', s.log, '-', '(' .. s.gone)
      end
      redis.call('ZADD', s.log, int(s.now), log_member(s.total + c.add))
      redis.call('PEXPIRE', s.log, ttl)
      return
    end
    -- A refund takes from the newest live requests, as the core's does
    -- (taking from those that have left would change no decision).
    local left = c.refund
    while left > 0 do
      local two = redis.call('ZRANGE', s.log, -2, -1, 'WITHSCORES')
      local n = #two
      if n == 0 or tonumber(two[n]) <= s.cutoff then
        break
      end
      local member, at = two[n - 1], two[n]
      local after, before = log_total(member), 0
      if n == 4 then
        before = log_total(two[1])
      end
      redis.call('ZREM', s.log, member)
      if after - before > left then
        redis.call('ZADD', s.log, at, log_member(after - left))
        left = 0
      else
        left = left - (after - before)
      end
    end
    -- An emptied sorted set vanishes; one refilled above needs its TTL again.
    redis.call('PEXPIRE', s.log, ttl)
    redis.call('SET', s.clock, int(s.now), 'PX', ttl)
  end,
}

-- The sliding log of `tollgate_v3` and `tollgate_v2`, kept (and its keys,
-- `:t`, `:c` and `:l`, distinct from the one-set log's) so that clients of
-- those versions still decide right on a server where a newer client loaded
-- this library: a sorted set of admitted requests scored by time (us), and a
-- twin scored by the running total of costs before each request; a member is
-- the running total after its request, unique per request even within one
-- microsecond, and zero-padded to 16 digits (2^53 has 16) so that members
-- sharing a time sort by it. A third key holds the time of the last refund,
-- which moves the key's clock without adding a request. Every lookup is
-- O(log n); pruning is amortised O(1).
local sliding_log_v3 = {
  keys = 3,
  read = function(keys, i, p, now)
    local times, totals, clock = keys[i], keys[i + 1], keys[i + 2]
    local newest = redis.call('ZRANGE', times, -1, -1, 'WITHSCORES')
    local total, newest_at = 0, nil
    if newest[1] then
      total, newest_at = tonumber(newest[1]), tonumber(newest[2])
      now = math.max(now, newest_at)
    end
    local moved = redis.call('GET', clock)
    if moved then
      now = math.max(now, tonumber(moved))
    end
    -- An entry at t has left once now >= t + period, i.e. t <= now - span.
    local cutoff = now - p.x
    local first = redis.call('ZRANGEBYSCORE', times, '(' .. int(cutoff), '+inf', 'LIMIT', 0, 1)[1]
    local start = total
    if first then
      start = tonumber(redis.call('ZSCORE', totals, first))
    end
    return {
      times = times, totals = totals, clock = clock, now = now, cutoff = cutoff,
      total = total, start = start, newest_at = newest_at,
    }
  end,
  judge = function(s, p, cost)
    -- The last entry whose running total before it is below start + excess.
    return log_judge(s, p, cost, function(s, excess)
      local k = redis.call('ZREVRANGEBYSCORE', s.totals, '(' .. int(s.start + excess), '-inf', 'LIMIT', 0, 1)[1]
      return tonumber(redis.call('ZSCORE', s.times, k))
    end)
  end,
  change = log_change,
  write = function(_, _, p, c, floor)
    local s = c.base
    local ttl = int(ttl_ms(p.x, floor))
    if c.add then
      redis.call('ZREMRANGEBYSCORE', s.times, '-inf', int(s.cutoff))
      redis.call('ZREMRANGEBYSCORE', s.totals, '-inf', '(' .. int(s.start))
      local member = string.format('%016d', s.total + c.add)
      redis.call('ZADD', s.times, int(s.now), member)
      redis.call('ZADD', s.totals, int(s.total), member)
      redis.call('PEXPIRE', s.times, ttl)
      redis.call('PEXPIRE', s.totals, ttl)
      return
    end
    -- A refund takes from the newest requests, as the core's does.
    local left = c.refund
    while left > 0 do
      local newest = redis.call('ZRANGE', s.times, -1, -1, 'WITHSCORES')
      if not newest[1] then
        break
      end
      local member, at = newest[1], newest[2]
      local after = tonumber(member)
      local before = tonumber(redis.call('ZSCORE', s.totals, member))
      redis.call('ZREM', s.times, member)
      redis.call('ZREM', s.totals, member)
      if after - before > left then
        local kept = string.format('%016d', after - left)
        redis.call('ZADD', s.times, at, kept)
        redis.call('ZADD', s.totals, int(before), kept)
        left = 0
      else
        left = left - (after - before)
      end
    end
    -- Emptied sorted sets vanish; one refilled above needs its TTL again.
    redis.call('PEXPIRE', s.times, ttl)
    redis.call('PEXPIRE', s.totals, ttl)
    redis.call('SET', s.clock, int(s.now), 'PX', ttl)
  end,
}

-- The token bucket, GCRA and the leaky meter make identical decisions on
-- their debt (capacity in use, in ticks of 1/q us; above the capacity after
-- a forced charge); they differ only in what they store: tokens left (below
-- 0 in debt), TAT - last charge, or the level.
local function debt_read(to_debt)
  return function(keys, i, p, now)
    local s = load(keys[i], 'dd')
    local debt, last = 0, 0
    if s then
      debt, last = to_debt(s[1], p.cap * p.x), s[2]
    end
    if now < last then
      now = last
    end
    return { debt = drained(debt, now - last, p.y), now = now }
  end
end

-- A refund or a forced charge of a debt of ticks (1/q us) of `p.x` per unit.
local function debt_change(s, p, op, cost)
  local debt, per_unit = s.debt, p.x
  if op == 'refund' then
    if cost >= div_ceil(debt, per_unit) then
      return { debt = 0, now = s.now }
    end
    return { debt = debt - cost * per_unit, now = s.now }
  end
  if cost > div_floor(p.max - debt, per_unit) then
    return nil
  end
  return { debt = debt + cost * per_unit, now = s.now }
end

local function bucket(to_debt, from_debt)
  return packed({
    keys = 1,
    read = debt_read(to_debt),
    judge = function(s, p, cost)
      local burst, per_unit, q = p.cap, p.x, p.y
      local capacity = burst * per_unit
      local function report(allowed, after, retry)
        return { allowed, div_floor(math.max(capacity - after, 0), per_unit), retry, div_ceil(after, q), 0 }
      end
      if cost > burst then
        return report(0, s.debt, -1)
      end
      local after = s.debt + cost * per_unit
      if after <= capacity or cost == 0 then
        return report(1, after, 0), { debt = after, now = s.now }
      end
      return report(0, s.debt, div_ceil(after - capacity, q))
    end,
    change = debt_change,
  }, 'dd', function(s, p)
    return from_debt(s.debt, p.cap * p.x), s.now
  end)
end

local function same(v)
  return v
end

local function complement(v, capacity)
  return capacity - v
end

algorithms.token_bucket = bucket(complement, complement)
algorithms.gcra = bucket(same, same)
algorithms.leaky_bucket = bucket(same, same)

-- Leaky queue: the wait until the drain is free (ticks of 1/q us) as of the
-- last charge, a debt like a bucket's; one request is served at once and
-- `burst` more wait.
algorithms.leaky_queue = packed({
  keys = 1,
  read = debt_read(same),
  judge = function(s, p, cost)
    local burst, per_unit, q = p.cap, p.x, p.y
    local wait = s.debt
    local capacity = burst * per_unit
    local function report(allowed, w, retry, delay)
      return { allowed, div_floor(math.max(capacity + per_unit - w, 0), per_unit), retry, div_ceil(w, q), delay }
    end
    if cost == 0 then
      return report(1, wait, 0, 0), s
    end
    if cost - 1 > burst then
      return report(0, wait, -1, 0)
    end
    local queued = wait + (cost - 1) * per_unit
    if queued <= capacity then
      local w = wait + cost * per_unit
      return report(1, w, 0, div_ceil(wait, q)), { debt = w, now = s.now }
    end
    return report(0, wait, div_ceil(queued - capacity, q), 0)
  end,
  change = debt_change,
}, 'dd', function(s)
  return s.debt, s.now
end)

-- Every limit's decision on `cost` after two slots for the reply's head
-- (limit j's allowed, remaining, retry, reset, delay at 5j - 2 to 5j + 2),
-- the states after charging it, and whether every limit admits.
local function judge_all(keys, limits, now, cost)
  local out, after, all = { 0, 0 }, {}, true
  for j, l in ipairs(limits) do
    local d, s = l.alg.judge(l.alg.read(keys, l.i, l.p, now), l.p, cost)
    all = all and d[1] == 1
    after[j] = s
    for _, v in ipairs(d) do
      out[#out + 1] = v
    end
  end
  return out, after, all
end

-- The server's clock in microseconds.
local function server_time()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A policy's limits from its arguments from `at` on (<n>, then per limit
-- <algorithm> <cap> <x> <y> <max>): per limit its algorithm (`older` holds
-- those the caller's version decides differently, by name, over
-- `algorithms`), its name, its first key `i` and its numbers `p`; or an
-- error reply.
local function limits_of(older, args, at)
  local limits, k = {}, 1
  for l = 0, tonumber(args[at]) - 1 do
    local a = at + 1 + 5 * l
    local alg = older[args[a]] or algorithms[args[a]]
    if not alg then
      return redis.error_reply('tollgate: unknown algorithm ' .. tostring(args[a]))
    end
    local p = {
      cap = tonumber(args[a + 1]), x = tonumber(args[a + 2]),
      y = tonumber(args[a + 3]), max = tonumber(args[a + 4]),
    }
    limits[l + 1] = { alg = alg, name = args[a], i = k, p = p }
    k = k + alg.keys
  end
  return limits
end

-- One call on all `limits` of a policy, atomically: every limit is charged
-- (or changed) or none is. `now` is the request time, or nil for the
-- server's (`clock()`), checked against `deadline`.
local function decide(limits, keys, now, floor, op, amount, deadline, clock)
  if not now then
    now = clock()
    if deadline and now > deadline then
      return redis.error_reply('TOLLGATE_LATE the call ran ' .. int(now - deadline)
        .. 'us past its deadline, when its caller had given up; nothing was charged')
    end
  end
  if limits.err then
    return limits
  end
  for _, l in ipairs(limits) do
    if #keys < l.i + l.alg.keys - 1 then
      return redis.error_reply('tollgate: too few keys for ' .. l.name)
    end
  end
  local charged = 0
  if op == 'refund' or op == 'force' then
    local changed = {}
    for j, l in ipairs(limits) do
      changed[j] = l.alg.change(l.alg.read(keys, l.i, l.p, now), l.p, op, amount)
      if not changed[j] then
        return redis.error_reply('TOLLGATE_RANGE a forced charge of ' .. int(amount)
          .. ' on ' .. l.name .. ' would take the key past ' .. int(l.p.max)
          .. ' units, where the script stops being exact; nothing was charged')
      end
    end
    if amount > 0 then
      for j, l in ipairs(limits) do
        l.alg.write(keys, l.i, l.p, changed[j], floor)
      end
    end
    if op == 'force' then
      charged = amount
    end
    amount = 0
  elseif op == 'lease' then
    -- Admission is monotone in the cost: the largest cost every limit
    -- admits is the smallest `remaining` of a peek.
    local peek = judge_all(keys, limits, now, 0)
    local most = amount
    for j = 1, #limits do
      most = math.min(most, peek[5 * j - 1])
    end
    if most == 0 then
      amount = math.min(amount, 1)
    else
      amount = most
    end
  elseif op ~= 'check' then
    return redis.error_reply('tollgate: unknown operation ' .. tostring(op))
  end
  local reply, after, all = judge_all(keys, limits, now, amount)
  if all then
    reply[1] = 1
    if amount > 0 then
      for j, l in ipairs(limits) do
        l.alg.write(keys, l.i, l.p, after[j], floor, reply[5 * j + 1])
      end
      charged = amount
    end
  end
  reply[2] = charged
  return reply
end

-- One call of `tollgate_v4` (see the head of the file).
local function run(older, keys, args, clock)
  local limits = limits_of(older, args, 5)
  local deadline = tonumber(args[6 + 5 * tonumber(args[5])])
  return decide(limits, keys, tonumber(args[1]), tonumber(args[2]), args[3], tonumber(args[4]), deadline, clock)
end

-- Several calls of `tollgate_v4` in one (see the head of the file), run in
-- order at one reading of the server's clock: each decides exactly as if
-- sent alone in that microsecond, and a call that fails (its deadline passed,
-- a forced charge out of range, a key of another type) fails alone, its
-- error in its place of the reply. A call's integers come packed as
-- little-endian doubles in one string (exact below 2^53), which the server
-- writes and the client reads in a fraction of the time of an array.
local function fold(keys, args)
  held, held_ttl = {}, {}
  local now
  local function clock()
    now = now or server_time()
    return now
  end
  local policies, a = {}, 2
  for p = 1, tonumber(args[1]) do
    policies[p] = limits_of({}, args, a)
    a = a + 1 + 5 * tonumber(args[a])
  end
  local out, k = {}, 0
  for c = 1, tonumber(args[a]) do
    local b = a + 7 * c - 6
    local nkeys, limits = tonumber(args[b]), policies[tonumber(args[b + 1])]
    local own_keys = {}
    for i = 1, nkeys do
      own_keys[i] = keys[k + i]
    end
    k = k + nkeys
    local ok, reply = pcall(decide, limits, own_keys, tonumber(args[b + 2]), tonumber(args[b + 3]),
      args[b + 4], tonumber(args[b + 5]), tonumber(args[b + 6]), clock)
    if not ok and type(reply) ~= 'table' then
      -- redis.call raises its error as a table with `err`; Lua's own as text.
      reply = redis.error_reply(tostring(reply))
    end
    if reply.err then
      out[c] = reply
    else
      out[c] = struct.pack('<' .. string.rep('d', #reply), unpack(reply))
    end
  end
  for key, ttl in pairs(held_ttl) do
    redis.call('SET', key, held[key], 'PX', ttl)
  end
  held, held_ttl = nil, nil
  return out
end

-- The entry points of a version of the arguments, with its `older`
-- algorithms (see `run`).
local function register(version, older)
  local function call(keys, args)
    held, held_ttl = nil, nil -- in case a fold failed before it was done
    return run(older, keys, args, server_time)
  end
  redis.register_function('tollgate_' .. version, call)
  -- The same entry point for peeks (a check of cost 0), declared read-only:
  -- callable with FCALL_RO, on replicas, and on a full server (maxmemory
  -- with noeviction), where Redis refuses functions that may write.
  redis.register_function { function_name = 'tollgate_' .. version .. '_peek', callback = call, flags = { 'no-writes' } }
end

register('v4', {})
redis.register_function('tollgate_v4_fold', fold)
-- The previous versions' names, for their clients during a rolling upgrade:
-- their arguments are these (v2 without a deadline), their sliding log the
-- two-set one on its own keys.
local previous = { sliding_log = sliding_log_v3 }
register('v3', previous)
register('v2', previous)
