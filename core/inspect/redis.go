package inspect

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
)

// redisInspector is the Inspector of a redisstore.Store.
type redisInspector struct{ s *redisstore.Store }

var (
	redisPeek   = redisstore.NewScript(redisPeekScript)
	redisDelete = redisstore.NewScript(redisDeleteScript)
	redisCount  = redisstore.NewScript(redisCountScript)
	redisLeases = redisstore.NewScript(redisLeasesScript)
)

// Peek implements Inspector with one read-only script on Redis's clock
// (luaPeekMain), at the keys Take writes.
func (r redisInspector) Peek(ctx context.Context, l *model.Limit, key string) (KeyState, error) {
	var ks KeyState
	if l.Rated() {
		var err error
		if ks, err = redisPeekRate(r.s, ctx, l, key); err != nil {
			return ks, err
		}
	}
	if l.MaxInFlight == 0 {
		return ks, nil
	}
	reply, err := r.s.Eval(ctx, redisLeases, []string{r.s.StateKey(l.Flight(), key)}, nil)
	if err != nil {
		return KeyState{}, err
	}
	held, ok := reply.(int64)
	if !ok {
		return KeyState{}, redisstore.UnexpectedReply("lease count", reply)
	}
	return flightState(l, ks, int(held)), nil
}

// redisPeekRate is Peek for the rate of l.
func redisPeekRate(s *redisstore.Store, ctx context.Context, l *model.Limit, key string) (KeyState, error) {
	keys, args := s.ScriptArgs([]model.Ask{{Limit: l, Key: key}})
	reply, err := s.Eval(ctx, redisPeek, keys, args)
	if err != nil {
		return KeyState{}, err
	}
	text, ok := reply.(string)
	f := strings.Fields(text)
	if !ok || len(f) != 6 {
		return KeyState{}, redisstore.UnexpectedReply("peek", reply)
	}
	var n [6]float64
	for i := range f {
		if n[i], err = strconv.ParseFloat(f[i], 64); err != nil || math.IsNaN(n[i]) {
			return KeyState{}, redisstore.UnexpectedReply("peek", reply)
		}
	}
	ks := KeyState{Remaining: l.Capacity()}
	if n[0] != 0 {
		ks = wholeAbsent(l, KeyState{Present: true, Remaining: nonNegative(n[1]), Reset: duration(n[2]), Next: duration(n[3]), Queued: nonNegative(n[4])})
	}
	return penalised(ks, int64(n[5])), nil
}

// Delete implements Inspector: it deletes the state's keys (a sliding
// window log's list too).
func (r redisInspector) Delete(ctx context.Context, l *model.Limit, key string) (bool, error) {
	if !l.Rated() {
		return false, nil // the key is the leases' (namespace "<name>:in_flight")
	}
	keys, _ := r.s.ScriptArgs([]model.Ask{{Limit: l, Key: key}})
	reply, err := r.s.Eval(ctx, redisDelete, keys, nil)
	if err != nil {
		return false, err
	}
	n, ok := reply.(int64)
	if !ok {
		return false, redisstore.UnexpectedReply("delete", reply)
	}
	return n > 0, nil
}

// CountKeys counts the states of limit l that the Redis server of store s
// holds (those of every key prefix sharing the limit's namespace; for a
// limit of requests in flight only, the keys with requests in flight),
// scanning at most budget keys of the database; complete is false when
// the budget ran out first, and n then counts what was seen. It is not
// supported on a Cluster, where every master would have to be scanned.
func CountKeys(ctx context.Context, s *redisstore.Store, l *model.Limit, budget int) (n int, complete bool, err error) {
	if s.Cluster() {
		return 0, false, errors.New("redis: counting keys is not supported on a Cluster")
	}
	if !l.Rated() {
		l = l.Flight()
	}
	// The keys of l's states, of its leases' sets for a limit of requests
	// in flight only (redisstore.Store.StateKey).
	prefix := s.StateKey(l, "")
	pattern := globEscape(prefix[:strings.LastIndexByte(prefix, ':')+1]) + "*}"
	cursor := "0"
	for scanned := 0; scanned < budget; scanned += redisCountStep {
		reply, err := s.Eval(ctx, redisCount, nil, []string{cursor, pattern, strconv.Itoa(redisCountStep)})
		if err != nil {
			return n, false, err
		}
		r, ok := reply.([]interface{})
		if !ok || len(r) != 2 {
			return n, false, redisstore.UnexpectedReply("count", reply)
		}
		c, ok1 := r[0].(string)
		m, ok2 := r[1].(int64)
		if !ok1 || !ok2 {
			return n, false, redisstore.UnexpectedReply("count", reply)
		}
		n += int(m)
		if c == "0" {
			return n, true, nil
		}
		cursor = c
	}
	return n, false, nil
}

// redisCountStep is the COUNT of each SCAN the count script runs, and so
// about how many keys one call examines.
const redisCountStep = 1000

// globEscape escapes the bytes that Redis's glob patterns (SCAN MATCH)
// give a meaning.
func globEscape(s string) string { return globEscaper.Replace(s) }

var globEscaper = strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`)

// The scripts of Peek, Delete and CountKeys. redisPeekScript decides a
// cost of zero with the take script's algorithms (redisstore.Lua), which
// charges nothing, and writes nothing.
const (
	redisPeekScript   = redisstore.Lua + luaPeekMain
	redisDeleteScript = "return redis.call('DEL', unpack(KEYS))"
	// redisLeasesScript counts the leases of KEYS[1] that have not
	// expired on Redis's clock (the milliseconds of the lease scripts,
	// luaLeaseClock in core/redis_inflight.go).
	redisLeasesScript = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
return redis.call('ZCOUNT', KEYS[1], '(' .. now, '+inf')
`
	redisCountScript = `
local r = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
return {r[1], #r[2]}
`
)

// luaPeekMain reports the state of its one ask (ARGV as the take script's,
// cost 0) as one string: present (1 or 0), remaining, then reset and next
// in whole ns, the cost in flight, and the time left of its penalty in
// whole ns (KeyState). A state is present when
// its key exists and its expiry (model.Expires, as stored_exp computes
// it from the stored state) is after now, as the MemoryStore's Peek
// decides (redisPeekRate then reads a whole limit as absent, as peekState
// does). A sliding window log is read as peekLog reads it: a zero-cost
// entry would count as an admission.
const luaPeekMain = `
local p = asks()[1]
local pen = 0
if p.pen > 0 then pen = nonneg(held_until(p) - now) end
local absent = '0 0 0 0 0 ' .. fmt(pen)
if call('EXISTS', p.key) == 0 then return absent end
local st = load(p.key)
if p.alg == 'swl' then
  if now < st.t then now = st.t end
  local len, rd = call('LLEN', p.logkey), reader(p.logkey)
  local a, drop = trim_log(st, now, p, rd, len)
  if drop == len then return absent end
  local oldest, newest = rd(drop), rd(len - 1)
  return '1 ' .. fmt(nonneg(p.cap - a)) .. ' ' .. fmt(mceil(newest + p.period - now)) .. ' ' .. fmt(mceil(oldest + p.period - now)) .. ' 0 ' .. fmt(pen)
end
local exp = st.t + mceil(st.a * p.unit)
if p.alg == 'lb' then exp = leaky_end(st.t, st.a)
elseif p.alg == 'fw' then exp = st.t + p.period
elseif p.alg == 'swc' then
  exp = st.t + p.period
  if st.a > 0 then exp = exp + p.period end
end
if exp <= now then return absent end
local algs = {tb = token_bucket, lb = leaky_bucket, fw = fixed_window, swc = sliding_counter}
local r = algs[p.alg](st, now, p)
local inflight = 0
if p.alg == 'tb' then
  inflight = nonneg(tonumber(r.fields[4]) - p.cap)
elseif p.alg == 'lb' then
  inflight = r.reset / p.unit
end
return '1 ' .. fmt(r.rem) .. ' ' .. fmt(mceil(r.reset)) .. ' ' .. fmt(mceil(r.next)) .. ' ' .. fmt(inflight) .. ' ' .. fmt(pen)
`
