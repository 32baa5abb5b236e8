package redisstore

// The Lua run by Store. Each algorithm is one Lua function that mirrors
// the Go function named above it, on the same state and in the same
// nanoseconds. The two scripts are the common prelude, the algorithms, and a
// main part: redisTakeScript decides and charges asks all-or-nothing,
// redisSettleScript settles their costs, charging more or giving back.
//
// Lua numbers are doubles, exact up to 2^53, while Unix nanoseconds are
// about 2^60; so the scripts count instants in nanoseconds since base, the
// current instant's whole Unix second, and store them as "<s> <ns>": whole
// Unix seconds and nanoseconds 0 to 999999999. Window starts are computed
// from Unix microseconds (below 2^53), exactly when the period is a whole
// number of microseconds, and stored as instants like State.T, so that a
// changed period (same limit name and algorithm) finds the state as
// model.Step does.
//
// Every algorithm function takes (st, now, p): st = {t, a, b}, the stored
// state (t in ns since base, the zero State's for a key never seen); now, in
// ns since base; p, the ask: quota, period and maxdelay (ns), cap
// (Limit.Capacity), cost, unit (ns of the period per cost unit, as
// Limit.unit), horizon (see ttl), key and logkey. It reads a sliding window log but writes
// nothing, and returns a table
//
//	ok, rem, reset, retry, delay   the Decision (durations in ns; retry −1 is Never)
//	fields                         the next state, as HSET arguments
//	exp                            its model.Expires (ns since base)
//	drop, push, set                sliding_window_log only: entries to drop
//	                               from the head, an entry to append, or the
//	                               new value of the newest entry
//
// which the main part writes back only when every ask of the call allows,
// and only after computing and checking every decision and time to live, so
// that an error never leaves some asks charged and others not.
const (
	redisTakeScript   = Lua + luaTakeMain
	redisSettleScript = Lua + luaRefund + luaCharge + luaSettleMain
)

// Lua is the take script but its main part: the prelude, which reads
// the clock and the asks of Store.ScriptArgs, and the algorithms. A
// script that begins with it reads states as the take script decides
// them, with its functions: asks() returns the asks p, load(p.key) a
// stored state st, token_bucket, leaky_bucket, fixed_window,
// sliding_counter and sliding_log(st, now, p) decide p on st at now (ns
// since base, the clock's current second), as does algs[code], trim_log
// and reader read a sliding window log, and the helpers call (redis.call), fmt (a number as
// the replies write it), nonneg, mceil and leaky_end are those of the
// algorithms.
const Lua = luaPrelude + luaTokenBucket + luaLeakyBucket + luaFixedWindow + luaSlidingCounter + luaSlidingLog + `
local algs = {tb = token_bucket, lb = leaky_bucket, fw = fixed_window, swc = sliding_counter, swl = sliding_log}
`

// luaPrelude reads the clock and the asks and defines the helpers.
//
// ARGV[1] is empty to use Redis's clock (TIME: seconds and microseconds),
// whose ticks are microseconds, so RetryAfter is rounded up to one; or an
// instant "<s> <ns>" supplied by the caller (tests). As Redis's clock still
// measures TTLs, keys then live at least a minute, so that they cannot
// expire before the caller's clock reaches their expiry. MAX_LOG is
// MaxLogQuota, MAX_SPAN MaxSpan in ns.
const luaPrelude = `
local floor, mceil, format, find, sub, concat, call = math.floor, math.ceil, string.format, string.find, string.sub, table.concat, redis.call
local base, now, tick, minttl
if ARGV[1] == '' then
  local t = call('TIME')
  base, now, tick, minttl = tonumber(t[1]), tonumber(t[2]) * 1000, 1000, 1
else
  local sp = find(ARGV[1], ' ', 1, true)
  base, now = tonumber(sub(ARGV[1], 1, sp - 1)), tonumber(sub(ARGV[1], sp + 1))
  tick, minttl = 1, 60000
end
local EPS = 1e-9
local MAX_LOG = 10000
local MAX_SPAN = 3153600000000000000
local NARGS = 6

-- fmt formats a number so that Go's ParseFloat reads it back exactly,
-- cheaply when it is a whole number.
local function fmt(x)
  if x == floor(x) and x > -1e15 and x < 1e15 then return format('%d', x) end
  return format('%.17g', x)
end
local function nonneg(x) if x < 0 then return 0 end return x end
-- leaky_end is a leaky bucket's expiry (leakyEnd): the first whole ns at
-- which its queue, ending at t + a, has drained.
local function leaky_end(t, a) if a > 0 then return t + 1 end return t end
-- next_units mirrors nextUnits: the units a limit with rem remaining, used
-- short of whole, must regain for rem floored to grow.
local function next_units(rem, used)
  local need = 1 - (rem - floor(rem))
  if need > used then need = used end
  return need
end

-- instant reads "<s> <ns>" as ns since base; stamp writes ns since base,
-- rounded to a whole ns, as "<s> <ns>".
local function instant(v)
  local sp = find(v, ' ', 1, true)
  return (tonumber(sub(v, 1, sp - 1)) - base) * 1e9 + tonumber(sub(v, sp + 1))
end
local function stamp(x)
  x = floor(x + 0.5)
  local s = floor(x / 1e9)
  return format('%d %d', base + s, x - s * 1e9)
end

-- wstart returns the start, in ns since base, of the window of length
-- p.period holding now (ns since base), windows counted from the Unix
-- epoch: Go's now − mod(now, period), computed in Unix microseconds.
local function wstart(now, p)
  local us = p.period / 1000
  return (floor((base * 1e6 + floor(now / 1000)) / us) * us - base * 1e6) * 1000
end

-- asks returns the parameters and keys of every ask, in order: nargs
-- (by default NARGS) ARGV each from ARGV[3], NARGS of them read here
-- (the algorithm, followed by + for a limit with a cost from the response
-- and, for a limit with a Penalty, by a space and the penalty in ns: pen);
-- one key each (state), two for a sliding_window_log (state, log). An
-- ask's horizon bounds, in ns, how long after the (clamped) instant of a
-- decision its state may matter: a full bucket's refill or queue, two
-- windows, one period; or a debt's MaxSpan. most is a token bucket's
-- largest deficit (Limit.most).
local function asks(nargs)
  nargs = nargs or NARGS
  local list, k = {}, 1
  for i = 1, (#ARGV - 2) / nargs do
    local j = 2 + (i - 1) * nargs
    local alg, quota, period, cap = ARGV[j + 1], tonumber(ARGV[j + 2]), tonumber(ARGV[j + 3]), tonumber(ARGV[j + 4])
    local pen, sp = 0, find(alg, ' ', 1, true)
    if sp then alg, pen = sub(alg, 1, sp - 1), tonumber(sub(alg, sp + 1)) end
    local debt = sub(alg, -1) == '+'
    if debt then alg = sub(alg, 1, -2) end
    local logkey, unit, horizon = false, period / quota, period
    if alg == 'swl' then logkey = KEYS[k + 1] end
    local maxdelay = tonumber(ARGV[j + 5])
    local most = cap + maxdelay / unit
    if alg == 'tb' then horizon = cap * unit + maxdelay -- what MaxDelay lends included
    elseif alg == 'lb' then horizon = cap * unit elseif alg == 'swc' then horizon = 2 * period end
    if debt and (alg == 'tb' or alg == 'lb') then most, horizon = MAX_SPAN / unit, MAX_SPAN end
    list[i] = {alg = alg, quota = quota, period = period, cap = cap,
      maxdelay = maxdelay, cost = tonumber(ARGV[j + 6]), unit = unit,
      horizon = horizon, key = KEYS[k], logkey = logkey, pen = pen, most = most}
    k = k + 1
    if logkey then k = k + 1 end
  end
  return list
end

-- load reads a state hash; a key never seen reads as the zero State, whose
-- instant is the Unix epoch.
local function load(key)
  local v = call('HMGET', key, 't', 'a', 'b')
  local st = {t = -base * 1e9, a = tonumber(v[2]) or 0, b = tonumber(v[3]) or 0}
  if v[1] then st.t = instant(v[1]) end
  return st
end

-- held_until is the instant (ns since base) until which ask p's key is
-- held out by its limit's Penalty, from field p of its state's hash: 0
-- when never.
local function held_until(p)
  local v = call('HGET', p.key, 'p')
  if v then return instant(v) end
  return 0
end

-- ttl is the time to live, in ms, of ask p's state that expires at exp
-- (model.Expires): at least minttl, and at most p.horizon plus a second, so
-- that a state left ahead of a clock that stepped back is forgotten then,
-- not kept for as long as the step. It is nil when not a usable PEXPIRE
-- argument (NaN, or infinite, beyond 10^15 ms), which the main parts check
-- before their first write.
local function ttl(exp, p)
  local ms, most = mceil((exp - now) / 1e6), mceil(p.horizon / 1e6) + 1000
  if ms > most then ms = most end
  if ms < minttl then ms = minttl end
  if ms >= minttl and ms <= 1e15 then return ms end
  return nil
end

-- bad reports whether a computed number is NaN.
local function bad(x) return x ~= x end

-- A log entry is "<s> <ns> <cost>": its instant and cost. reader returns a
-- function that reads entry i (from 0) of a log as (instant, cost), 64
-- entries per LRANGE.
local function entry(t, c) return stamp(t) .. ' ' .. fmt(c) end
local function parse(e)
  local x = find(e, ' ', 1, true)
  local y = find(e, ' ', x + 1, true)
  return (tonumber(sub(e, 1, x - 1)) - base) * 1e9 + tonumber(sub(e, x + 1, y - 1)),
    tonumber(sub(e, y + 1))
end
local function reader(logkey)
  local first, chunk = -1, nil
  return function(i)
    local b = i - i % 64
    if b ~= first then
      chunk = call('LRANGE', logkey, b, b + 63)
      first = b
    end
    return parse(chunk[i - b + 1])
  end
end
`

// luaTokenBucket mirrors model.TokenBucketStep (core/model/tokenbucket.go). State: t
// is the last refill instant, a the deficit.
const luaTokenBucket = `
local function token_bucket(st, now, p)
  if now < st.t then now = st.t end
  local deficit, owe = st.a, p.maxdelay / p.unit
  if deficit > p.most then deficit = p.most end
  if deficit > 0 then
    deficit = deficit - (now - st.t) * p.quota / p.period
    if deficit < EPS then deficit = 0 end
  end
  local ok, retry, a, delay = false, 0, deficit, 0
  local tokens = p.cap - deficit
  if p.cost > p.cap + EPS then
    retry = -1
  elseif tokens + EPS >= p.cost then
    ok = true
    a = deficit + p.cost
    if a > p.cap then a = p.cap end
  elseif deficit + p.cost <= p.cap + owe + EPS then
    ok = true
    delay = (p.cost - tokens) * p.unit
    a = deficit + p.cost
  else
    retry = (p.cost - tokens - owe) * p.unit
  end
  local nxt = 0
  if a > p.cap then nxt = (a - p.cap + next_units(0, p.cap)) * p.unit
  elseif a > 0 then nxt = next_units(p.cap - a, a) * p.unit end
  return {ok = ok, rem = nonneg(p.cap - a), reset = a * p.unit, next = nxt, retry = retry, delay = delay,
    fields = {'t', stamp(now), 'a', fmt(a)}, exp = now + a * p.unit}
end
`

// luaLeakyBucket mirrors model.LeakyBucketStep (core/model/leakybucket.go). State: t
// is the theoretical arrival time (the queue drains then), a the fraction
// of a nanosecond by which it drains later.
const luaLeakyBucket = `
local function leaky_bucket(st, now, p)
  local start, carry = st.t, st.a
  if start < now then start, carry = now, 0 end
  local ahead0 = start - now
  local delay = ahead0 + carry
  local backlog = delay / p.unit
  local fits = p.maxdelay == 0 or ahead0 < p.maxdelay or (ahead0 == p.maxdelay and carry == 0)
  local ok, retry, t, a = false, 0, st.t, st.a
  if p.cost > p.cap + EPS then
    retry = -1
  elseif backlog + p.cost <= p.cap + EPS and fits then
    ok = true
    local x = carry + p.cost * p.unit
    local w = floor(x)
    t, a = start + w, x - w
  else
    local wait = (backlog + p.cost - p.cap) * p.unit
    if not fits then
      local bydelay = ahead0 - p.maxdelay
      if carry > 0 then bydelay = bydelay + 1 end
      if bydelay > wait then wait = bydelay end
    end
    retry = nonneg(wait)
  end
  if not ok then delay = 0 end
  local ahead = nonneg(t - now + a)
  local rem = nonneg(p.cap - ahead / p.unit)
  local nxt = 0
  if ahead > 0 then nxt = next_units(rem, ahead / p.unit) * p.unit end
  if p.maxdelay > 0 then
    local bydelay, room = 0, (p.maxdelay - ahead) / p.unit + EPS
    if room >= 0 then bydelay = floor(room) + 1 end
    if bydelay < rem then
      rem = bydelay
      if room >= 0 then nxt = (1 - (room - floor(room))) * p.unit else nxt = -room * p.unit end
    end
  end
  return {ok = ok, rem = rem, reset = ahead, next = nxt, retry = retry, delay = delay,
    fields = {'t', stamp(t), 'a', fmt(a)}, exp = leaky_end(t, a)}
end
`

// luaFixedWindow mirrors model.FixedWindowStep (core/model/window.go). State: t is
// the start of the current window, a the cost counted in it.
const luaFixedWindow = `
local function fixed_window(st, now, p)
  if now < st.t then now = st.t end
  local start = wstart(now, p)
  local a = st.a
  if start ~= st.t then a = 0 end
  local reset = start + p.period - now
  local ok, retry = false, 0
  if p.cost > p.cap + EPS then
    retry = -1
  elseif a + p.cost <= p.cap + EPS then
    ok = true
    a = a + p.cost
  else
    retry = reset
  end
  if a <= 0 then reset = 0 end
  return {ok = ok, rem = nonneg(p.cap - a), reset = reset, next = reset, retry = retry, delay = 0,
    fields = {'t', stamp(start), 'a', fmt(a)}, exp = start + p.period}
end
`

// luaSlidingCounter mirrors model.SlidingCounterStep (core/model/window.go). State: t
// is the start of the current window (as in luaFixedWindow), a its count,
// b the previous window's.
const luaSlidingCounter = `
local function sliding_counter(st, now, p)
  if now < st.t then now = st.t end
  local start = wstart(now, p)
  local a, b = st.a, st.b
  if start == st.t then
  elseif start == st.t + p.period then
    a, b = 0, st.a
  else
    a, b = 0, 0
  end
  local elapsed = now - start
  local estimate = b * (1 - elapsed / p.period) + a
  local ok, retry = false, 0
  if p.cost > p.cap + EPS then
    retry = -1
  elseif estimate + p.cost <= p.cap + EPS then
    ok = true
    a = a + p.cost
    estimate = estimate + p.cost
  elseif a + p.cost <= p.cap + EPS then
    local f = 1 - (p.cap - a - p.cost) / b
    retry = nonneg(f * p.period - elapsed)
  else
    local g = 1 - (p.cap - p.cost) / a
    retry = nonneg(p.period - elapsed + g * p.period)
  end
  local reset, exp = 0, start + p.period
  if a > 0 then
    reset, exp = 2 * p.period - elapsed, start + 2 * p.period
  elseif b > 0 then
    reset = p.period - elapsed
  end
  local rem, nxt = nonneg(p.cap - estimate), 0
  if estimate > 0 then
    -- slidingCounter's Next: prev slides out during this window, then cur.
    local need, left = next_units(rem, estimate), p.period - elapsed
    if b > 0 and need <= b * left / p.period then
      nxt = need * p.period / b
    else
      need = need - b * left / p.period
      if a > 0 and need < a then nxt = left + need * p.period / a else nxt = left + p.period end
    end
  end
  return {ok = ok, rem = rem, reset = reset, next = nxt, retry = retry, delay = 0,
    fields = {'t', stamp(start), 'a', fmt(a), 'b', fmt(b)}, exp = exp}
end
`

// luaTrimLog mirrors model's trimLog (core/model/window.go): the sum of the costs in the log of
// len entries read by rd once those older than a period before now are
// dropped, and how many are.
const luaTrimLog = `
local function trim_log(st, now, p, rd, len)
  local a, drop = st.a, 0
  while drop < len do
    local et, ec = rd(drop)
    if et + p.period > now then break end
    a = a - ec
    drop = drop + 1
  end
  return a, drop
end
`

// luaSlidingLog mirrors model.SlidingLogStep and trimLog in
// core/model/window.go. State: t is the newest instant seen, a the sum of
// the costs in the log, a list of entries, oldest first, under its own key.
const luaSlidingLog = luaTrimLog + `
local function sliding_log(st, now, p)
  if now < st.t then now = st.t end
  local rd = reader(p.logkey)
  local len = call('LLEN', p.logkey)
  local a, drop = trim_log(st, now, p, rd, len)
  local n = len - drop
  if n == 0 then a = 0 end
  local ok, retry, push, set, newest = false, 0, false, false, 0
  if n > 0 then newest = rd(len - 1) end
  if p.cost > p.cap + EPS then
    retry = -1
  elseif a + p.cost <= p.cap + EPS then
    ok = true
    if p.cost == 0 then -- charges nothing: no entry
    elseif n >= MAX_LOG then
      local _, c = rd(len - 1)
      set = entry(now, c + p.cost)
    else
      push = entry(now, p.cost)
      n = n + 1
    end
    newest = now
    a = a + p.cost
  else
    local need = a + p.cost - p.cap
    for i = drop, len - 1 do
      local et, ec = rd(i)
      need = need - ec
      if need <= EPS then
        retry = nonneg(et + p.period - now)
        break
      end
    end
  end
  local reset, exp, nxt = 0, 0, 0
  if n > 0 then
    reset, exp = newest + p.period - now, newest + p.period
    local oldest = now -- the entry pushed into an empty log
    if drop < len then oldest = rd(drop) end
    nxt = oldest + p.period - now
  end
  return {ok = ok, rem = nonneg(p.cap - a), reset = reset, next = nxt, retry = retry, delay = 0,
    fields = {'t', stamp(now), 'a', fmt(a)}, exp = exp, drop = drop, push = push, set = set}
end
`

// luaTakeMain decides every ask on one reading of the clock and, when all
// allow and ARGV[2] is "1" or "2", writes every next state (with ARGV[2]
// "0" it charges nothing); whatever ARGV[2], it writes the penalty that
// a refusal starts (see penalise), as a refusal charges nothing. It computes and checks every decision and every
// time to live before its first write, and fails without writing if one
// is NaN or infinite. It returns one string: per ask, separated by commas,
// allowed (1 or 0), then remaining, and reset, retry, delay and next in
// whole ns, separated by spaces, each as fmt writes it (one bulk string is
// much cheaper to read under Yaegi than nested arrays). An admission it
// charged is followed by its mark for Refund, " <s> <ns> <a>": the next
// state's t and a as written, when delayed or ARGV[2] is "2".
const luaTakeMain = `
-- penalise mirrors model.Penalise on the decision r of ask p, whose limit
-- has a Penalty; r.held is the instant a penalty that r starts ends.
local function penalise(r, p)
  local untl = held_until(p)
  if untl <= now then
    if r.ok then return end
    untl = now + p.pen
    r.held = untl
  end
  local left = untl - now
  if r.ok or r.next < left then r.next = left end
  r.ok, r.rem, r.delay = false, 0, 0
  if r.retry >= 0 and r.retry < left then r.retry = left end
  if r.reset < left then r.reset = left end
end
local list, rs, out, all = asks(), {}, {}, true
for i, p in ipairs(list) do
  local r = algs[p.alg](load(p.key), now, p)
  if p.pen > 0 then penalise(r, p) end
  if bad(r.rem) or bad(r.reset) or bad(r.next) or bad(r.retry) or bad(r.delay) then
    return redis.error_reply('sluice: decision of ask ' .. i .. ' is not a number')
  end
  rs[i] = r
  all = all and r.ok
  local retry = r.retry
  if retry > 0 then retry = mceil(retry / tick) * tick end
  out[i] = (r.ok and '1 ' or '0 ') .. fmt(r.rem) .. ' ' .. fmt(mceil(r.reset)) .. ' ' .. fmt(mceil(retry)) .. ' ' .. fmt(mceil(r.delay)) .. ' ' .. fmt(mceil(r.next))
end
for i, p in ipairs(list) do
  if rs[i].held then
    -- The hash lives at least as long as the penalty.
    local ms = mceil(p.pen / 1e6)
    if ms < minttl then ms = minttl end
    call('HSET', p.key, 'p', stamp(rs[i].held))
    if call('PTTL', p.key) < ms then call('PEXPIRE', p.key, ms) end
  end
end
if not all or ARGV[2] == '0' then return concat(out, ',') end
local ttls = {}
for i, p in ipairs(list) do
  ttls[i] = ttl(rs[i].exp, p)
  if not ttls[i] then return redis.error_reply('sluice: expiry of ask ' .. i .. ' is not finite') end
end
for i, p in ipairs(list) do
  local r = rs[i]
  if ARGV[2] == '2' or r.delay > 0 then out[i] = out[i] .. ' ' .. r.fields[2] .. ' ' .. r.fields[4] end
  call('HSET', p.key, unpack(r.fields))
  call('PEXPIRE', p.key, ttls[i])
  if p.logkey then
    if r.drop > 0 then call('LTRIM', p.logkey, r.drop, -1) end
    if r.push then call('RPUSH', p.logkey, r.push) end
    if r.set then call('LSET', p.logkey, -1, r.set) end
    call('PEXPIRE', p.logkey, ttls[i])
  end
end
return concat(out, ',')
`

// luaRefund mirrors refund in algorithm.go, and refundLog in
// window.go for the sliding window log. The ask p carries the mark of the
// charge to refund, mt (ns since base) and ma, or mt false for none. Like
// the algorithm functions it reads but writes nothing: it returns nil when
// the state stays as it is, or the next state's HSET arguments,
// model.Expires as exp and, for a log, set (the index and new value of the
// entry it takes part of the cost from, or false), from and to (the
// indexes, from 0, of the entries it removes, from to to − 1) and n (the
// entries left). p.cost is what it gives back.
const luaRefund = `
local function refund(st, p)
  if not p.mt then return nil end
  local last = st.t == p.mt and st.a == p.ma
  if p.alg == 'lb' then
    if not last then return nil end
    local t, a = st.t, st.a
    if t > now or (t == now and a > 0) then
      local ahead = t - now + a - p.cost * p.unit
      t, a = now, 0
      if ahead > 0 then
        local w = floor(ahead)
        t, a = now + w, ahead - w
      end
    end
    return {fields = {'t', stamp(t), 'a', fmt(a)}, exp = leaky_end(t, a)}
  elseif p.alg == 'fw' or p.alg == 'swc' then
    local a, b = st.a, st.b
    if st.t == p.mt then
      a = nonneg(a - p.cost)
    elseif p.alg == 'swc' and st.t == p.mt + p.period then
      b = nonneg(b - p.cost)
    else
      return nil
    end
    local exp = st.t + p.period
    if p.alg == 'swc' and a > 0 then exp = exp + p.period end
    if p.alg == 'fw' then return {fields = {'a', fmt(a)}, exp = exp} end
    return {fields = {'a', fmt(a), 'b', fmt(b)}, exp = exp}
  elseif p.alg == 'swl' then
    local len, cost, a, set = call('LLEN', p.logkey), p.cost, st.a, false
    local i = len
    while i > 0 and parse(call('LINDEX', p.logkey, i - 1)) > p.mt do i = i - 1 end
    local j = i
    while j > 0 and cost > EPS do
      local et, ec = parse(call('LINDEX', p.logkey, j - 1))
      if ec > cost + EPS then
        set = {j - 1, entry(et, ec - cost)}
        a = a - cost
        break
      end
      cost = cost - ec
      a = a - ec
      j = j - 1
    end
    local n, exp = len - (i - j), 0
    if n == 0 then
      a = 0
    elseif i < len then
      exp = parse(call('LINDEX', p.logkey, len - 1)) + p.period
    else
      exp = parse(call('LINDEX', p.logkey, j - 1)) + p.period
    end
    return {fields = {'a', fmt(a)}, exp = exp, set = set, from = j, to = i, n = n}
  end
  if not last and p.maxdelay > 0 then return nil end
  local r, left = p.cost, p.ma
  if now > p.mt then left = left - (now - p.mt) * p.quota / p.period end
  if left < r then r = left end
  if r <= 0 then return nil end
  local a = nonneg(st.a - r)
  return {fields = {'a', fmt(a)}, exp = st.t + a * p.unit}
end
`

// luaCharge mirrors model's charge (core/model/settle.go): ask p's state
// st charged p.cost at now whatever its capacity. It decides a cost of 0
// on st, which brings st to now, then adds p.cost, and returns what
// refund returns, a log's drop and push (or set) as the algorithms do.
const luaCharge = `
local function charge(st, p)
  local c = p.cost
  p.cost = 0
  local r = algs[p.alg](st, now, p)
  local f = r.fields
  local t, a = instant(f[2]), tonumber(f[4])
  r.n = 1
  if p.alg == 'lb' then
    a = a + c * p.unit
    local most = now + MAX_SPAN - t
    if a > most then a = nonneg(most) end
    local w = floor(a)
    t, a = t + w, a - w
    f[2], r.exp = stamp(t), leaky_end(t, a)
  else
    a = a + c
    if p.alg == 'tb' then
      if a > p.most then a = p.most end
      r.exp = t + a * p.unit
    elseif p.alg == 'swc' then
      r.exp = t + 2 * p.period
    elseif p.alg == 'swl' then
      if call('LLEN', p.logkey) - r.drop >= MAX_LOG then
        local _, ec = parse(call('LINDEX', p.logkey, -1))
        r.set = {-1, entry(t, ec + c)}
      else
        r.push = entry(t, c)
      end
      r.exp = t + p.period
    end
  end
  f[4] = fmt(a)
  return r
end
`

// luaSettleMain settles every ask whose state exists, each ask's six
// arguments (its cost being the settlement: charged when positive, given
// back when negative) followed by its mark, "<s> <ns>" and a, or two
// empty strings for none, which leaves the ask alone (ARGV[2] is unused).
// A charge makes the state of a key that has none. It computes and
// checks every next state and time to live before its first write (so,
// as in luaTakeMain, the asks of one call are taken to name distinct
// states), and returns how many it changed. A log's entries are removed
// by overwriting them with "-" and removing every "-", which no entry is.
const luaSettleMain = `
local list, rs, ttls = asks(NARGS + 2), {}, {}
for i, p in ipairs(list) do
  local j = 2 + i * (NARGS + 2)
  if ARGV[j - 1] ~= '' then p.mt, p.ma = instant(ARGV[j - 1]), tonumber(ARGV[j]) end
  if p.mt and p.cost > 0 then
    rs[i] = charge(load(p.key), p)
  elseif p.mt and p.cost < 0 and call('EXISTS', p.key) == 1 then
    p.cost = -p.cost
    rs[i] = refund(load(p.key), p)
  end
  if rs[i] then
    ttls[i] = ttl(rs[i].exp, p)
    if not ttls[i] then return redis.error_reply('sluice: expiry of settlement ' .. i .. ' is not finite') end
    if p.pen > 0 then
      -- Never sooner than the key's penalty ends.
      local left = mceil((held_until(p) - now) / 1e6)
      if left > ttls[i] then ttls[i] = left end
    end
  end
end
local n = 0
for i, p in ipairs(list) do
  local r = rs[i]
  if r then
    call('HSET', p.key, unpack(r.fields))
    call('PEXPIRE', p.key, ttls[i])
    if p.logkey then
      if r.drop and r.drop > 0 then call('LTRIM', p.logkey, r.drop, -1) end
      if r.push then call('RPUSH', p.logkey, r.push) end
      if r.set then call('LSET', p.logkey, r.set[1], r.set[2]) end
      if r.from and r.from < r.to then
        for k = r.from, r.to - 1 do call('LSET', p.logkey, k, '-') end
        call('LREM', p.logkey, 0, '-')
      end
      if r.n > 0 then call('PEXPIRE', p.logkey, ttls[i]) end
    end
    n = n + 1
  end
end
return n
`
