#!lua name=tollgate
--[[
tollgate: the seven rate-limiting algorithms of SPEC.md as one Redis Function,
`tollgate_decide`. The same file runs through EVALSHA on servers without
Functions (the Rust side wraps it, see src/script.rs).

FCALL tollgate_decide <nkeys> <keys...> <now_us> <ttl_floor_ms> <cost> <n>
      then per limit: <algorithm> <cap> <x> <y>

  now_us        the request time in microseconds, or "" for the server's TIME
  ttl_floor_ms  the least TTL given to a charged key (0 with the server clock;
                replays of a trace's own times need more, see src/backend.rs)
  cost          the request's cost (0 is a peek)
  algorithm     fixed_window | sliding_counter     cap = limit, x/y = a, b
                sliding_log                        cap = limit, x = ceil(period/1us)
                token_bucket | gcra | leaky_bucket cap = burst, x/y = p, q
                leaky_queue                        cap = burst, x/y = p, q
  keys          one per limit, two for sliding_log (times, running totals)

Returns {all_allowed, then per limit: allowed, remaining, retry_us, reset_us,
delay_us}; retry_us is -1 for "never". Every duration is the exact one of the
core rounded up to the microsecond, the resolution of the store's clock.

Exactness. Lua numbers are doubles: integers are exact below 2^53. The Rust
side (src/exact.rs) reduces each quota to small integer units and refuses a
quota whose largest intermediate value below could exceed 2^53, so every
value computed here is an exact integer:

  windows   the period is a units of g ns (g = gcd(period, 1000)), one
            microsecond is b = 1000/g units; positions in a window are
            fmod(fmod(now, a) * b, a) < a*b.
  buckets   the emission interval T = period/limit is p/q microseconds in
            lowest terms; a debt is kept in ticks of 1/q us, at most
            burst*p, relative to the last charge (never an absolute
            timestamp, which would need ~70 bits).
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

-- A key's state is a few integers packed as doubles (exact, and cheaper to
-- read and write than decimal text); nil for a fresh key.
local function load(key, layout)
  local v = redis.call('GET', key)
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
  redis.call('SET', key, struct.pack(layout, ...), 'PX', ttl_ms(reset_us, floor_ms))
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

-- Each algorithm: how many keys it uses, and decide(keys, i, cap, x, y, now,
-- cost) returning its decision and, when it admits, a function that charges.
local algorithms = {}

algorithms.fixed_window = {
  keys = 1,
  decide = function(keys, i, limit, a, b, now, cost)
    local key = keys[i]
    local s = load(key, 'dd') or { 0, 0 }
    local count, last = s[1], s[2]
    if now < last then
      now = last
    end
    if boundaries(last, now, a, b) > 0 then
      count = 0
    end
    local to_end = div_ceil(a - offset(now, a, b), b)
    local function report(allowed, c, retry)
      local reset = 0
      if c > 0 then
        reset = to_end
      end
      return { allowed, math.max(limit - c, 0), retry, reset, 0 }
    end
    if cost > limit then
      return report(0, count, -1)
    end
    if cost <= limit - count or cost == 0 then
      local c = count + cost
      return report(1, c, 0), function(floor)
        save(key, 'dd', to_end, floor, c, now)
      end
    end
    return report(0, count, to_end)
  end,
}

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

algorithms.sliding_counter = {
  keys = 1,
  decide = function(keys, i, limit, a, b, now, cost)
    local key = keys[i]
    local s = load(key, 'ddd') or { 0, 0, 0 }
    local prev, curr, last = s[1], s[2], s[3]
    if now < last then
      now = last
    end
    local crossed = boundaries(last, now, a, b)
    if crossed == 1 then
      prev, curr = curr, 0
    elseif crossed == 2 then
      prev, curr = 0, 0
    end
    -- The previous window's weight: the units of it still in the trailing period.
    local weight = a - offset(now, a, b)
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
      local d = report(1, curr + cost, 0)
      return d, function(floor)
        save(key, 'ddd', d[4], floor, prev, curr + cost, now)
      end
    end
    return report(0, curr, div_ceil(counter_wait(limit, a, prev, curr, cost, weight), b))
  end,
}

-- Sliding log: a sorted set of admitted requests scored by time (us), and a
-- twin scored by the running total of costs before each request; a member is
-- the running total after its request, unique per request even within one
-- microsecond, and zero-padded to 16 digits (2^53 has 16) so that members
-- sharing a time sort by it. Every lookup is O(log n); pruning is amortised
-- O(1).
algorithms.sliding_log = {
  keys = 2,
  decide = function(keys, i, limit, span, _, now, cost)
    local times, totals = keys[i], keys[i + 1]
    local newest = redis.call('ZRANGE', times, -1, -1, 'WITHSCORES')
    local total, newest_at = 0, nil
    if newest[1] then
      total, newest_at = tonumber(newest[1]), tonumber(newest[2])
      if now < newest_at then
        now = newest_at
      end
    end
    -- An entry at t has left once now >= t + period, i.e. t <= now - span.
    local cutoff = now - span
    local first = redis.call('ZRANGEBYSCORE', times, '(' .. int(cutoff), '+inf', 'LIMIT', 0, 1)[1]
    local start = total
    if first then
      start = tonumber(redis.call('ZSCORE', totals, first))
    end
    local sum = total - start
    local function report(allowed, s, at, retry)
      local reset = 0
      if s > 0 and at then
        reset = at - now + span
      end
      return { allowed, math.max(limit - s, 0), retry, reset, 0 }
    end
    if cost > limit then
      return report(0, sum, newest_at, -1)
    end
    if cost <= limit - sum then
      if cost == 0 then
        return report(1, sum, newest_at, 0)
      end
      return report(1, sum + cost, now, 0), function(floor)
        redis.call('ZREMRANGEBYSCORE', times, '-inf', int(cutoff))
        redis.call('ZREMRANGEBYSCORE', totals, '-inf', '(' .. int(start))
        local member = string.format('%016d', total + cost)
        redis.call('ZADD', times, int(now), member)
        redis.call('ZADD', totals, int(total), member)
        local ttl = int(ttl_ms(span, floor))
        redis.call('PEXPIRE', times, ttl)
        redis.call('PEXPIRE', totals, ttl)
      end
    end
    -- The oldest live requests must leave until `excess` cost has gone: the
    -- last entry whose running total before it is below start + excess.
    local excess = sum + cost - limit
    local k = redis.call('ZREVRANGEBYSCORE', totals, '(' .. int(start + excess), '-inf', 'LIMIT', 0, 1)[1]
    local at = tonumber(redis.call('ZSCORE', times, k))
    return report(0, sum, newest_at, at - now + span)
  end,
}

-- The token bucket, GCRA and the leaky meter make identical decisions on
-- their debt (capacity in use, in ticks of 1/q us); they differ only in what
-- they store: tokens left, TAT - last charge, or the level.
local function bucket(to_debt, from_debt)
  return {
    keys = 1,
    decide = function(keys, i, burst, p, q, now, cost)
      local key = keys[i]
      local capacity = burst * p
      local s = load(key, 'dd')
      local debt, last = 0, 0
      if s then
        debt, last = to_debt(s[1], capacity), s[2]
      end
      if now < last then
        now = last
      end
      debt = drained(debt, now - last, q)
      local function report(allowed, after, retry)
        return { allowed, div_floor(capacity - after, p), retry, div_ceil(after, q), 0 }
      end
      if cost > burst then
        return report(0, debt, -1)
      end
      local after = debt + cost * p
      if after <= capacity or cost == 0 then
        local d = report(1, after, 0)
        return d, function(floor)
          save(key, 'dd', d[4], floor, from_debt(after, capacity), now)
        end
      end
      return report(0, debt, div_ceil(after - capacity, q))
    end,
  }
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
-- last charge; one request is served at once and `burst` more wait.
algorithms.leaky_queue = {
  keys = 1,
  decide = function(keys, i, burst, p, q, now, cost)
    local key = keys[i]
    local s = load(key, 'dd') or { 0, 0 }
    local last = s[2]
    if now < last then
      now = last
    end
    local wait = drained(s[1], now - last, q)
    local capacity = burst * p
    local function report(allowed, w, retry, delay)
      return { allowed, div_floor(math.max(capacity + p - w, 0), p), retry, div_ceil(w, q), delay }
    end
    if cost == 0 then
      return report(1, wait, 0, 0)
    end
    if cost - 1 > burst then
      return report(0, wait, -1, 0)
    end
    local queued = wait + (cost - 1) * p
    if queued <= capacity then
      local w = wait + cost * p
      local d = report(1, w, 0, div_ceil(wait, q))
      return d, function(floor)
        save(key, 'dd', d[4], floor, w, now)
      end
    end
    return report(0, wait, div_ceil(queued - capacity, q), 0)
  end,
}

-- All limits of a policy, atomically: every limit is charged or none is.
local function decide(keys, args)
  local now = tonumber(args[1])
  if not now then
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  local floor, cost, n = tonumber(args[2]), tonumber(args[3]), tonumber(args[4])
  local out, charges, all, k = { 1 }, {}, true, 1
  for l = 0, n - 1 do
    local at = 5 + 4 * l
    local alg = algorithms[args[at]]
    if not alg then
      return redis.error_reply('tollgate: unknown algorithm ' .. tostring(args[at]))
    end
    if #keys < k + alg.keys - 1 then
      return redis.error_reply('tollgate: too few keys for ' .. args[at])
    end
    local d, charge = alg.decide(keys, k, tonumber(args[at + 1]), tonumber(args[at + 2]),
      tonumber(args[at + 3]), now, cost)
    k = k + alg.keys
    if d[1] == 1 then
      charges[#charges + 1] = charge
    else
      all = false
    end
    for _, v in ipairs(d) do
      out[#out + 1] = v
    end
  end
  if not all then
    out[1] = 0
  elseif cost > 0 then
    for _, charge in ipairs(charges) do
      charge(floor)
    end
  end
  return out
end

redis.register_function('tollgate_decide', decide)
