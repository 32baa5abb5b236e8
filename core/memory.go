package core

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"time"
)

// DefaultMaxKeys is the MemoryStore capacity used when MemoryConfig.MaxKeys
// is zero.
const DefaultMaxKeys = 1000000

const (
	memShards     = 64 // a power of two
	memShardShift = 58 // 64 − log2(memShards): the top bits of a hash pick its shard
	memWays       = 8  // slots per bucket
)

// MemoryConfig configures a MemoryStore.
type MemoryConfig struct {
	// MaxKeys caps the number of (limit, key) states held. When a new key
	// arrives and its bucket of slots is full, the store forgets a state that
	// has expired (is equivalent to a fresh one) if there is one, and
	// otherwise the one closest to expiring. Zero means DefaultMaxKeys.
	MaxKeys int
	// Clock supplies instants; nil means SystemClock().
	Clock Clock
}

// MemoryStore is an in-process Store. Its memory is bounded by MaxKeys:
// states live in a fixed set-associative table of MaxKeys slots (40 bytes
// each; pages are touched only as slots are used), divided among 64 shards
// with a mutex each, so a decision locks only the shards of its keys. It
// starts no goroutine; expired states are reclaimed as their slots are
// needed.
//
// Keys are identified by a 64-bit hash (hash/maphash with a per-store random
// seed, mixed with the limit's namespace): with n keys, two of them share a
// state with probability about n²/2⁶⁵ (3·10⁻⁸ for a million keys), and an
// attacker cannot aim for a collision without the seed.
type MemoryStore struct {
	clock Clock // nil: the system clock, read from the embedded systemClock
	systemClock
	seed    maphash.Seed
	buckets uint64 // buckets per shard
	// shards has memShards elements. It is a slice, not an array, because
	// Yaegi allocates a zeroed copy of the type of every value a function
	// reads, s.shards included, on every call.
	shards []memShard
}

type memShard struct {
	mu    sync.Mutex
	slots []memSlot
	logs  map[uint64][]LogEntry // sliding_window_log entries, by slot hash
	_     [24]byte              // keeps hot mutexes on separate cache lines
}

// memSlot is one stored State; h == 0 marks a free slot.
type memSlot struct {
	h    uint64
	t    int64
	a, b float64
	exp  int64 // Limit.Expiry of the state
}

// NewMemoryStore returns an empty store.
func NewMemoryStore(cfg MemoryConfig) (*MemoryStore, error) {
	if cfg.MaxKeys < 0 {
		return nil, errors.New("max_keys: must not be negative")
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	s := &MemoryStore{clock: cfg.Clock, seed: maphash.MakeSeed(), shards: make([]memShard, memShards)}
	if cfg.Clock == nil {
		s.systemClock = newSystemClock()
	}
	s.buckets = uint64(cfg.MaxKeys / (memShards * memWays))
	if s.buckets == 0 {
		s.buckets = 1
	}
	for i := 0; i < memShards; i++ {
		s.shards[i].slots = make([]memSlot, s.buckets*memWays)
		s.shards[i].logs = make(map[uint64][]LogEntry)
	}
	return s, nil
}

// Cap is the number of states the store can hold: MaxKeys rounded down to a
// whole number of buckets (but at least one bucket per shard).
func (s *MemoryStore) Cap() int { return int(s.buckets) * memShards * memWays }

// Len counts the states held. It locks every shard in turn.
func (s *MemoryStore) Len() int {
	n := 0
	for i := 0; i < memShards; i++ {
		sh := &s.shards[i]
		sh.mu.Lock()
		for j := range sh.slots {
			if sh.slots[j].h != 0 {
				n++
			}
		}
		sh.mu.Unlock()
	}
	return n
}

// Under Yaegi every interpreted call costs about a microsecond, and a
// method call about four (the interpreter wraps its receiver through
// reflection), so the helpers below are functions, and Take's common case
// of one ask (take1) does the hashing and the slot lookup inline.

// memHash identifies (limit, key). It is never 0, which marks free slots.
// Its top bits choose the shard (memShardShift); the whole hash, modulo the
// number of buckets, the bucket. take1 repeats it inline.
func memHash(s *MemoryStore, l *Limit, key string) uint64 {
	h := maphash.String(s.seed, key) ^ l.nsHash
	// splitmix64 finalizer: spreads the namespace over all bits.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	if h == 0 {
		h = 1
	}
	return h
}

// memNow reads the store's clock. take1 repeats it inline.
func memNow(s *MemoryStore) int64 {
	if s.clock == nil {
		return s.wall + int64(time.Since(s.base))
	}
	return s.clock()
}

// memFind returns the index of h's slot in sh, or -1.
func memFind(s *MemoryStore, sh *memShard, h uint64) int {
	b := int(h%s.buckets) * memWays
	for i := b; i < b+memWays; i++ {
		if sh.slots[i].h == h {
			return i
		}
	}
	return -1
}

// memLoad sets *st to the state of h (the zero State when absent).
func memLoad(s *MemoryStore, sh *memShard, h uint64, l *Limit, st *State) {
	*st = State{}
	if i := memFind(s, sh, h); i >= 0 {
		sl := &sh.slots[i]
		*st = State{T: sl.t, A: sl.a, B: sl.b}
		if l.Algorithm == SlidingWindowLog {
			st.Log = sh.logs[h]
		}
	}
}

// memSave stores *st, which expires at exp, as h's state, taking a slot
// for h if it has none.
func memSave(s *MemoryStore, sh *memShard, h uint64, l *Limit, st *State, exp, now int64) {
	i := memFind(s, sh, h)
	if i < 0 {
		i = memClaim(sh, int(h%s.buckets)*memWays, now)
	}
	sh.slots[i] = memSlot{h: h, t: st.T, a: st.A, b: st.B, exp: exp}
	if l.Algorithm == SlidingWindowLog {
		memPutLog(sh, h, st.Log)
	}
}

// memClaim returns the slot of bucket b (the index of its first slot) to
// give a new state: a free one, else an expired one, else the one that
// expires first, whose state it forgets.
func memClaim(sh *memShard, b int, now int64) int {
	i := b
	for j := b; j < b+memWays; j++ {
		if sh.slots[j].h == 0 || sh.slots[j].exp <= now {
			i = j
			break
		}
		if sh.slots[j].exp < sh.slots[i].exp {
			i = j
		}
	}
	if old := sh.slots[i].h; old != 0 {
		delete(sh.logs, old)
	}
	return i
}

// memPutLog stores the sliding_window_log entries of h.
func memPutLog(sh *memShard, h uint64, log []LogEntry) {
	if len(log) == 0 {
		delete(sh.logs, h)
	} else {
		sh.logs[h] = log
	}
}

// maxAsks is how many asks one Take handles without allocating.
const maxAsks = 8

// Take implements Store. It locks the shards of all asks (in shard order, so
// concurrent calls cannot deadlock), decides each ask on one clock reading,
// and saves the new states only if every ask is allowed.
func (s *MemoryStore) Take(ctx context.Context, asks []Ask, out []Decision) error {
	if len(asks) == 1 {
		take1(s, &asks[0], &out[0])
		return nil
	}
	takeMany(s, asks, out)
	return nil
}

// takeMany is Take for several asks. It is apart from Take because Yaegi
// allocates a function's local arrays on every call, even on paths that do
// not use them.
func takeMany(s *MemoryStore, asks []Ask, out []Decision) {
	var hb [maxAsks]uint64
	var stb [maxAsks]State
	var eb [maxAsks]int64
	hs, sts, exps := hb[:0], stb[:0], eb[:0]
	if len(asks) > maxAsks {
		hs, sts, exps = make([]uint64, 0, len(asks)), make([]State, 0, len(asks)), make([]int64, 0, len(asks))
	}
	var locked uint64 // bit i: shard i is to be locked
	for i := range asks {
		h := memHash(s, asks[i].Limit, asks[i].Key)
		hs = append(hs, h)
		locked |= uint64(1) << (h >> memShardShift)
	}
	lockShards(s, locked)
	now := memNow(s)
	all := true
	for i := range asks {
		a := &asks[i]
		sh := &s.shards[hs[i]>>memShardShift]
		sts = append(sts, State{})
		st := &sts[i]
		memLoad(s, sh, hs[i], a.Limit, st)
		exps = append(exps, decide(a.Limit, st, now, a.Cost, &out[i]))
		all = all && out[i].Allowed
	}
	if all {
		for i := range asks {
			memSave(s, &s.shards[hs[i]>>memShardShift], hs[i], asks[i].Limit, &sts[i], exps[i], now)
		}
	}
	unlockShards(s, locked)
}

// take1 decides one ask into *d and returns the instant it decided at:
// Take's common case, and the Gate's. The hash (memHash), the slot lookup,
// the clock reading (memNow) and decide's dispatch to the token bucket are
// inline.
func take1(s *MemoryStore, a *Ask, d *Decision) int64 {
	l := a.Limit
	h := maphash.String(s.seed, a.Key) ^ l.nsHash
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	if h == 0 {
		h = 1
	}
	sh := &s.shards[h>>memShardShift]
	i := int(h%s.buckets) * memWays
	end := i + memWays
	sh.mu.Lock()
	for i < end && sh.slots[i].h != h {
		i++
	}
	var st State
	if i < end {
		sl := &sh.slots[i]
		st = State{T: sl.t, A: sl.a, B: sl.b}
		if l.Algorithm == SlidingWindowLog {
			st.Log = sh.logs[h]
		}
	}
	var now int64
	if s.clock == nil {
		now = s.wall + int64(time.Since(s.base))
	} else {
		now = s.clock()
	}
	var exp int64
	if l.Algorithm == TokenBucket { // decide's first case, without its call
		exp = tokenBucket(l, &st, now, a.Cost, d)
	} else {
		exp = decide(l, &st, now, a.Cost, d)
	}
	if d.Allowed {
		if i == end {
			i = memClaim(sh, end-memWays, now)
		}
		sh.slots[i] = memSlot{h: h, t: st.T, a: st.A, b: st.B, exp: exp}
		if l.Algorithm == SlidingWindowLog {
			memPutLog(sh, h, st.Log)
		}
	}
	sh.mu.Unlock()
	return now
}

// Refund implements Store.
func (s *MemoryStore) Refund(ctx context.Context, asks []Ask) error {
	for i := range asks {
		a := &asks[i]
		h := memHash(s, a.Limit, a.Key)
		sh := &s.shards[h>>memShardShift]
		sh.mu.Lock()
		if memFind(s, sh, h) >= 0 {
			now := memNow(s)
			var st State
			memLoad(s, sh, h, a.Limit, &st)
			st = a.Limit.Refund(st, now, a.Cost)
			memSave(s, sh, h, a.Limit, &st, expiry(a.Limit, &st), now)
		}
		sh.mu.Unlock()
	}
	return nil
}

func lockShards(s *MemoryStore, set uint64) {
	for i := 0; i < memShards; i++ {
		if set&(uint64(1)<<uint(i)) != 0 { // typed: Yaegi v0.16.1 panics on an untyped 1 here
			s.shards[i].mu.Lock()
		}
	}
}

func unlockShards(s *MemoryStore, set uint64) {
	for i := 0; i < memShards; i++ {
		if set&(uint64(1)<<uint(i)) != 0 {
			s.shards[i].mu.Unlock()
		}
	}
}
