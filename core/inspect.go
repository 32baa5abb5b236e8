package core

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// KeyState is what a store holds for one (limit, key), read without
// charging it: what an operator asks about a client.
type KeyState struct {
	// Present reports whether the key's state differs from a fresh key's:
	// the store holds a live state for it in which the limit is short of
	// whole (Reset > 0). A key never seen, forgotten, expired or whose
	// limit is whole again reads as absent, with the limit whole, although
	// the store may still hold its state for a while (a rejected request
	// keeps it alive; see MemoryStore).
	Present bool
	// Remaining is the cost that could be admitted now; never negative.
	Remaining float64
	// Reset is the time until the limit is whole again for the key.
	Reset time.Duration
	// Next is the time until more than Remaining is available (see
	// Decision.Next); zero when whole.
	Next time.Duration
	// Queued is the cost admitted with a delay that the limit still
	// holds: a leaky_bucket's queue (the requests waiting for their turn
	// and the one whose interval is running), a token_bucket's tokens lent
	// to waiting requests (MaxDelay). It is zero for the window
	// algorithms, which never delay.
	Queued float64
	// InFlight, for a limit with MaxInFlight, is the number of the key's
	// requests in progress, each holding a slot (in Redis, the leases that
	// have not expired). For a limit of requests in flight only, Present
	// reports whether any is, and Remaining is the slots left.
	InFlight int
}

// Inspector is a Store that can report and forget a key's state, for
// operators: MemoryStore and RedisStore implement it.
type Inspector interface {
	// Peek reports the state of (l, key) at the store's current instant
	// without changing it. key is the Ask's Key.
	Peek(ctx context.Context, l *Limit, key string) (KeyState, error)
	// Delete forgets the rate state of (l, key), so that its next request
	// finds the limit whole, and reports whether a state was held. The
	// slots of requests in progress (MaxInFlight) are theirs until they
	// end: Delete leaves them.
	Delete(ctx context.Context, l *Limit, key string) (bool, error)
}

// flightState completes ks, the state of (l, key) held or not, with the
// key's held requests in flight, for a limit with MaxInFlight.
func flightState(l *Limit, ks KeyState, held int) KeyState {
	ks.InFlight = held
	if !l.Rated() {
		ks.Present, ks.Remaining = held > 0, float64(l.MaxInFlight-held)
		if ks.Remaining < 0 {
			ks.Remaining = 0
		}
	}
	return ks
}

// peekState computes the KeyState of st, the state of a key of l held
// (present) or not, at now. It decides a cost of zero on st, which
// charges nothing and reports what is left, except for a sliding window
// log, where a zero-cost entry would count as an admission.
func peekState(l *Limit, st State, present bool, now int64) KeyState {
	if !present {
		return KeyState{Remaining: l.capacity}
	}
	if l.Algorithm == SlidingWindowLog {
		return wholeAbsent(l, peekLog(l, st, now))
	}
	var d Decision
	decide(l, &st, now, 0, &d)
	ks := KeyState{Present: true, Remaining: d.Remaining, Reset: d.Reset, Next: d.Next}
	switch l.Algorithm {
	case TokenBucket:
		// Past the capacity, the deficit is what the bucket lent.
		ks.Queued = nonNegative(st.A - l.capacity)
	case LeakyBucket:
		ks.Queued = nonNegative(float64(st.T-now)+st.A) / l.unit
	}
	return wholeAbsent(l, ks)
}

// wholeAbsent returns ks, the state of a key of l that the store holds,
// or the absent state when its limit is whole (see KeyState.Present).
func wholeAbsent(l *Limit, ks KeyState) KeyState {
	if ks.Reset <= 0 {
		return KeyState{Remaining: l.capacity}
	}
	return ks
}

// peekLog is peekState for a sliding window log: the entries of the last
// period count, the oldest expiring first.
func peekLog(l *Limit, st State, now int64) KeyState {
	if now < st.T {
		now = st.T
	}
	trimLog(l, &st, now)
	ks := KeyState{Present: len(st.Log) > 0, Remaining: nonNegative(l.capacity - st.A)}
	if len(st.Log) > 0 {
		ks.Reset = duration(float64(st.Log[len(st.Log)-1].T + l.period - now))
		ks.Next = duration(float64(st.Log[0].T + l.period - now))
	}
	return ks
}

// Peek implements Inspector. It reads the state under its shard's lock,
// hashed as Take hashes it.
func (s *MemoryStore) Peek(ctx context.Context, l *Limit, key string) (KeyState, error) {
	var ks KeyState
	if l.Rated() {
		ks = memPeek(s, l, key)
	}
	if l.flight == nil {
		return ks, nil
	}
	h, t := s.hash(l.flight, key), s.flight
	t.mu.Lock()
	held := t.held[h]
	t.mu.Unlock()
	return flightState(l, ks, held), nil
}

// memPeek is MemoryStore.Peek for the rate of l.
func memPeek(s *MemoryStore, l *Limit, key string) KeyState {
	h := s.hash(l, key)
	sh := s.shard(h)
	sh.mu.Lock()
	st, held := sh.load(h, l)
	// Take may write a full log's newest entry in place.
	st.Log = append([]LogEntry(nil), st.Log...)
	exp := sh.slots[h].exp
	now := s.now()
	sh.mu.Unlock()
	return peekState(l, st, held && exp > now, now)
}

// Delete implements Inspector.
func (s *MemoryStore) Delete(ctx context.Context, l *Limit, key string) (bool, error) {
	if !l.Rated() {
		return false, nil
	}
	h := s.hash(l, key)
	sh := &s.shards[h>>memShardShift]
	sh.mu.Lock()
	sl, held := sh.slots[h]
	delete(sh.slots, h)
	delete(sh.logs, h)
	now := s.now()
	sh.mu.Unlock()
	return held && sl.exp > now, nil
}

var (
	redisPeek   = NewRedisScript(redisPeekScript)
	redisDelete = NewRedisScript(redisDeleteScript)
	redisCount  = NewRedisScript(redisCountScript)
	redisLeases = NewRedisScript(redisLeasesScript)
)

// Peek implements Inspector with one read-only script on Redis's clock
// (luaPeekMain), at the keys Take writes.
func (s *RedisStore) Peek(ctx context.Context, l *Limit, key string) (KeyState, error) {
	var ks KeyState
	if l.Rated() {
		var err error
		if ks, err = redisPeekRate(s, ctx, l, key); err != nil {
			return ks, err
		}
	}
	if l.flight == nil {
		return ks, nil
	}
	reply, err := s.Eval(ctx, redisLeases, []string{s.key(l.flight, key)}, nil)
	if err != nil {
		return KeyState{}, err
	}
	held, ok := reply.(int64)
	if !ok {
		return KeyState{}, errors.New("redis: unexpected reply to the lease count script: " + describeReply(reply))
	}
	return flightState(l, ks, int(held)), nil
}

// redisPeekRate is RedisStore.Peek for the rate of l.
func redisPeekRate(s *RedisStore, ctx context.Context, l *Limit, key string) (KeyState, error) {
	keys, args := s.scriptArgs([]Ask{{Limit: l, Key: key}}, false)
	reply, err := s.Eval(ctx, redisPeek, keys, args)
	if err != nil {
		return KeyState{}, err
	}
	text, ok := reply.(string)
	f := strings.Fields(text)
	if !ok || len(f) != 5 {
		return KeyState{}, errors.New("redis: unexpected reply to the peek script: " + describeReply(reply))
	}
	var n [5]float64
	for i := range f {
		if n[i], err = replyNumber(f[i]); err != nil {
			return KeyState{}, errors.New("redis: unexpected reply to the peek script: " + describeReply(reply))
		}
	}
	if n[0] == 0 {
		return KeyState{Remaining: l.capacity}, nil
	}
	return wholeAbsent(l, KeyState{Present: true, Remaining: nonNegative(n[1]), Reset: duration(n[2]), Next: duration(n[3]), Queued: nonNegative(n[4])}), nil
}

// Delete implements Inspector: it deletes the state's keys (a sliding
// window log's list too).
func (s *RedisStore) Delete(ctx context.Context, l *Limit, key string) (bool, error) {
	if !l.Rated() {
		return false, nil // the key is the leases' (namespace "<name>:in_flight")
	}
	k := s.key(l, key)
	reply, err := s.Eval(ctx, redisDelete, []string{k, k + ":log"}, nil)
	if err != nil {
		return false, err
	}
	n, ok := reply.(int64)
	if !ok {
		return false, errors.New("redis: unexpected reply to the delete script: " + describeReply(reply))
	}
	return n > 0, nil
}

// CountKeys counts the states of limit l that the Redis server holds
// (those of every key prefix sharing the limit's namespace), scanning at
// most budget keys of the database; complete is false when the budget ran
// out first, and n then counts what was seen. It is not supported on a
// Cluster, where every master would have to be scanned.
func (s *RedisStore) CountKeys(ctx context.Context, l *Limit, budget int) (n int, complete bool, err error) {
	if s.cluster {
		return 0, false, errors.New("redis: counting keys is not supported on a Cluster")
	}
	tag := l.redis.tag
	if !l.Rated() {
		tag = l.flight.redis.tag // the keys with requests in flight
	}
	pattern := globEscape(s.prefix+tag) + "*}"
	cursor := "0"
	for scanned := 0; scanned < budget; scanned += redisCountStep {
		reply, err := s.Eval(ctx, redisCount, nil, []string{cursor, pattern, strconv.Itoa(redisCountStep)})
		if err != nil {
			return n, false, err
		}
		r, ok := reply.([]interface{})
		if !ok || len(r) != 2 {
			return n, false, errors.New("redis: unexpected reply to the count script: " + describeReply(reply))
		}
		c, ok1 := r[0].(string)
		m, ok2 := r[1].(int64)
		if !ok1 || !ok2 {
			return n, false, errors.New("redis: unexpected reply to the count script: " + describeReply(reply))
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

var _ Inspector = (*MemoryStore)(nil)
var _ Inspector = (*RedisStore)(nil)

// The scripts of Peek, Delete and CountKeys. redisPeekScript decides a
// cost of zero with the take script's algorithms, which charges nothing,
// and writes nothing.
const (
	redisPeekScript   = luaPrelude + luaTokenBucket + luaLeakyBucket + luaFixedWindow + luaSlidingCounter + luaTrimLog + luaPeekMain
	redisDeleteScript = "return redis.call('DEL', unpack(KEYS))"
	// redisLeasesScript counts the leases of KEYS[1] that have not
	// expired on Redis's clock (luaLeaseClock's milliseconds).
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
// in whole ns, and the cost in flight (KeyState). A state is present when
// its key exists and its expiry (Limit.Expiry, as stored_exp computes it
// from the stored state) is after now, as MemoryStore.Peek decides
// (redisPeekRate then reads a whole limit as absent, as peekState does). A
// sliding window log is read as peekLog reads it: a zero-cost entry would
// count as an admission.
const luaPeekMain = `
local absent = '0 0 0 0 0'
local p = asks()[1]
if call('EXISTS', p.key) == 0 then return absent end
local st = load(p.key)
if p.alg == 'swl' then
  if now < st.t then now = st.t end
  local len, rd = call('LLEN', p.logkey), reader(p.logkey)
  local a, drop = trim_log(st, now, p, rd, len)
  if drop == len then return absent end
  local oldest, newest = rd(drop), rd(len - 1)
  return '1 ' .. fmt(nonneg(p.cap - a)) .. ' ' .. fmt(mceil(newest + p.period - now)) .. ' ' .. fmt(mceil(oldest + p.period - now)) .. ' 0'
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
return '1 ' .. fmt(r.rem) .. ' ' .. fmt(mceil(r.reset)) .. ' ' .. fmt(mceil(r.next)) .. ' ' .. fmt(inflight)
`
