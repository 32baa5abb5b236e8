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
	// memSample is how many states an eviction examines.
	memSample = 16
	// memGrace is how long below the cap an expired state is kept.
	memGrace = int64(time.Minute)
)

// MemoryConfig configures a MemoryStore.
type MemoryConfig struct {
	// MaxKeys caps the number of (limit, key) states held; each of the 64
	// shards holds at most MaxKeys/64, and keys spread evenly over them,
	// so a shard fills only when the store is nearly full (or, for a cap
	// of a few thousand keys, a little before). Below its shard's cap a
	// state is kept until it expires (is equivalent to a fresh one); when
	// a new key arrives at it, the store forgets one state of the shard:
	// the first expired one among memSample (16) it examines, or else the
	// one of them closest to expiring. A request a state rejects keeps it
	// at least as long as one that has just spent the whole capacity, so
	// that a key being limited is not the one that goes while it keeps
	// asking. Zero means DefaultMaxKeys.
	MaxKeys int
	// Clock supplies instants; nil means SystemClock().
	Clock Clock
}

// MemoryStore is an in-process Store. Its memory grows with the states it
// holds and is bounded by MaxKeys: states live in hash maps divided among
// 64 shards with a mutex each, so a decision locks only the shards of its
// keys, and each shard holds at most MaxKeys/64 states (about 60 bytes
// each, plus 16 bytes per sliding_window_log entry). Go maps do not give
// memory back, so a store keeps the room of the most states it has held
// at once. It starts no goroutine: each new key drops an expired state
// if one is among the 16 it examines, so the states held follow the live
// keys, and at the cap it makes room as MaxKeys says.
//
// Keys are identified by a 64-bit hash (hash/maphash with a per-store random
// seed, mixed with the limit's namespace): with n keys, two of them share a
// state with probability about n²/2⁶⁵ (3·10⁻⁸ for a million keys), and an
// attacker cannot aim for a collision without the seed.
type MemoryStore struct {
	clock Clock // nil: the system clock, read from the embedded systemClock
	systemClock
	seed     maphash.Seed
	perShard int // the most states a shard holds
	// shards has memShards elements. It is a slice, not an array, because
	// Yaegi allocates a zeroed copy of the type of every value a function
	// reads, s.shards included, on every call.
	shards []memShard
	flight *flightTable // requests in flight (inflight.go)
}

type memShard struct {
	mu    sync.Mutex
	slots map[uint64]memSlot    // states by hash
	logs  map[uint64][]LogEntry // sliding_window_log entries, by hash
	_     [40]byte              // keeps hot mutexes on separate cache lines
}

// memSlot is one stored State.
type memSlot struct {
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
	s := &MemoryStore{clock: cfg.Clock, seed: maphash.MakeSeed(), shards: make([]memShard, memShards), flight: newFlightTable()}
	if cfg.Clock == nil {
		s.systemClock = newSystemClock()
	}
	s.perShard = cfg.MaxKeys / memShards
	if s.perShard == 0 {
		s.perShard = 1
	}
	for i := 0; i < memShards; i++ {
		s.shards[i].slots = make(map[uint64]memSlot)
		s.shards[i].logs = make(map[uint64][]LogEntry)
	}
	return s, nil
}

// Cap is the number of states the store can hold: MaxKeys rounded down to a
// multiple of 64 shards (but at least one state per shard).
func (s *MemoryStore) Cap() int { return s.perShard * memShards }

// Len counts the states held, expired ones included until they are
// dropped. It locks every shard in turn.
func (s *MemoryStore) Len() int {
	n := 0
	for i := 0; i < memShards; i++ {
		sh := &s.shards[i]
		sh.mu.Lock()
		n += len(sh.slots)
		sh.mu.Unlock()
	}
	return n
}

// Under Yaegi every interpreted call costs about a microsecond, and a
// method call about four (the interpreter wraps its receiver through
// reflection), so the helpers below are functions.

// memHash identifies (limit, key); its top bits choose the shard
// (memShardShift). take1 and ServeLane repeat it inline.
func memHash(s *MemoryStore, l *Limit, key string) uint64 {
	return maphash.String(s.seed, key) ^ l.nsHash
}

// memNow reads the store's clock. take1, takeMany and ServeLane repeat it
// inline.
func memNow(s *MemoryStore) int64 {
	if s.clock == nil {
		return s.wall + int64(time.Since(s.base))
	}
	return s.clock()
}

// memLoad sets *st to the state of h (the zero State when absent).
func memLoad(sh *memShard, h uint64, l *Limit, st *State) {
	sl := sh.slots[h]
	*st = State{T: sl.t, A: sl.a, B: sl.b}
	if l.Algorithm == SlidingWindowLog {
		st.Log = sh.logs[h]
	}
}

// memSave stores *st, which expires at exp, as h's state, making room for
// it if h is new (memRoom).
func memSave(s *MemoryStore, sh *memShard, h uint64, l *Limit, st *State, exp, now int64) {
	if _, held := sh.slots[h]; !held {
		memRoom(s, sh, now)
	}
	sh.slots[h] = memSlot{t: st.T, a: st.A, b: st.B, exp: exp}
	if l.Algorithm == SlidingWindowLog {
		memPutLog(sh, h, st.Log)
	}
}

// memTouch keeps sl, the state of h that l held when it rejected a request
// at now, for l.keep at least, as if the request had just spent the
// whole capacity, and a nanosecond more, to outlive the states of new keys
// made at the same instant: the key is being limited, and a flood of new
// keys, which evicts the states closest to expiring first (memRoom), must
// not forget it while it keeps asking, which would hand it the capacity
// again.
func memTouch(sh *memShard, h uint64, sl memSlot, l *Limit, now int64) {
	now += l.keep + 1 // the expiry to keep, in now: no := (see decide)
	if sl.exp < now {
		sl.exp = now
		sh.slots[h] = sl
	}
}

// memTouchAll is memTouch for the held states of asks, whose hashes
// ms hold, which takeMany rejected at now with their shards locked. It is
// a function of its own so that takeMany's admissions do not pay for it
// under Yaegi.
func memTouchAll(s *MemoryStore, asks []Ask, ms []memAsk, now int64) {
	for i := range asks {
		sh := &s.shards[ms[i].h>>memShardShift]
		if sl, held := sh.slots[ms[i].h]; held {
			memTouch(sh, ms[i].h, sl, asks[i].Limit, now)
		}
	}
}

// memRoom prepares sh, whose mutex is held, for one new state at now. It
// examines up to memSample states and forgets the first one expired for
// memGrace, so that while new keys arrive, states of keys never seen again
// do not outlive their expiry by long. (The grace keeps what a clock that
// steps back a little, such as another instance's, still counts.) At the cap, if none of them has expired,
// it forgets the one of them that expires first: the least valuable, since
// forgetting a state hands its key a fresh one, and the state closest to
// expiring is closest to fresh. Below the cap no live state is forgotten.
func memRoom(s *MemoryStore, sh *memShard, now int64) {
	full := len(sh.slots) >= s.perShard
	old := now - memGrace
	if full {
		old = now
	}
	victim, soonest, seen := uint64(0), int64(0), 0
	for h, sl := range sh.slots {
		if sl.exp <= old {
			victim, seen = h, -1
			break
		}
		if seen == 0 || sl.exp < soonest {
			victim, soonest = h, sl.exp
		}
		seen++
		if seen == memSample {
			break
		}
	}
	if seen < 0 || seen > 0 && full {
		delete(sh.slots, victim)
		delete(sh.logs, victim)
	}
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
		take1(s, asks[0].Limit, asks[0].Key, asks[0].Cost, &out[0], 0, nil, noSlot, false, noState, nil, 0, 0)
		return nil
	}
	takeMany(s, asks, out, noMemAsks, noOrder, nil, nil, nil, nil, nil, nil, nil, nil, noSlot, false, false, false, 0, 0)
	return nil
}

// noMemAsks and noOrder are takeMany's mb and ib, zero.
var (
	noMemAsks [maxAsks]memAsk
	noOrder   [maxAsks]int
)

// memAsk is what takeMany holds of one ask: its hash, the state decided
// and its expiry, and whether the ask's log was full (MaxLogQuota
// entries) when loaded, with its newest entry then: slidingLog merges an
// admission into that entry in place, the only element of a stored log
// that a decision writes, which restoreLogs puts back when the asks are
// not saved.
type memAsk struct {
	h      uint64
	exp    int64
	st     State
	full   bool
	newest LogEntry
}

// takeMany is Take for several asks, and returns the instant it decided
// at. It is apart from Take because Yaegi allocates a function's local
// arrays on every call, even on paths that do not use them. The hash
// (memHash), the clock reading (memNow) and the load and save of each
// state (memLoad, memSave) are inline, a token_bucket or
// sliding_window_log ask calls its algorithm without decide (the first
// for the common case, the second for its log), and its loops count with
// i: under Yaegi each call costs, and a range loop's variables are
// allocated again at each iteration. Its parameters after out are its
// variables, which callers pass as zero values (see serveLaneTB): mb and
// ib hold ms and order for up to maxAsks asks.
func takeMany(s *MemoryStore, asks []Ask, out []Decision,
	mb [maxAsks]memAsk, ib [maxAsks]int, ms []memAsk, order []int, a *Ask, l *Limit, m *memAsk, st *State,
	d *Decision, sh *memShard, sl memSlot, held, all, full bool, i int, now int64) int64 {
	if len(asks) > maxAsks {
		ms, order = make([]memAsk, len(asks)), make([]int, 0, len(asks))
	} else {
		ms, order = mb[:len(asks)], ib[:0]
	}
	for i = 0; i < len(asks); i++ {
		a = &asks[i]
		m = &ms[i]
		m.h = hashString(s.seed, a.Key)
		m.h ^= a.Limit.nsHash
		if i == 0 { // shardOrder of no shards, without its call
			order = append(order, int(m.h>>memShardShift))
		} else {
			order = shardOrder(order, int(m.h>>memShardShift), 0)
		}
	}
	for i = 0; i < len(order); i++ {
		s.shards[order[i]].mu.Lock()
	}
	now = int64(timeSince(s.base))
	now += s.wall
	if s.clock != nil {
		now = s.clock()
	}
	all = true
	for i = 0; i < len(asks); i++ {
		a = &asks[i]
		l = a.Limit
		m = &ms[i]
		st = &m.st
		d = &out[i]
		sh = &s.shards[m.h>>memShardShift]
		sl = sh.slots[m.h]
		*st = State{T: sl.t, A: sl.a, B: sl.b}
		switch l.Algorithm {
		case TokenBucket:
			m.exp = tokenBucket(l, st, now, a.Cost, d, 0, 0, 0, 0)
		case SlidingWindowLog:
			st.Log = sh.logs[m.h]
			if len(st.Log) >= MaxLogQuota {
				m.full = true
				full = true
				m.newest = st.Log[len(st.Log)-1]
			}
			m.exp = slidingLog(l, st, now, a.Cost, d, 0, 0, 0, nil)
		default:
			m.exp = decide(l, st, now, a.Cost, d)
		}
		if !d.Allowed {
			all = false
		}
	}
	if all {
		for i = 0; i < len(asks); i++ {
			m = &ms[i]
			st = &m.st
			sh = &s.shards[m.h>>memShardShift]
			if _, held = sh.slots[m.h]; !held {
				memRoom(s, sh, now)
			}
			sh.slots[m.h] = memSlot{t: st.T, a: st.A, b: st.B, exp: m.exp}
			out[i].mark = mark{t: st.T, a: st.A, ok: true}
			if asks[i].Limit.Algorithm == SlidingWindowLog {
				memPutLog(sh, m.h, st.Log)
			}
		}
	} else {
		if full {
			restoreLogs(s, ms)
		}
		memTouchAll(s, asks, ms, now)
	}
	for i = 0; i < len(order); i++ {
		s.shards[order[i]].mu.Unlock()
	}
	return now
}

// restoreLogs puts back, for takeMany's asks ms that were not saved, the
// newest entry of each full log it decided (see memAsk).
func restoreLogs(s *MemoryStore, ms []memAsk) {
	for i := range ms {
		if m := &ms[i]; m.full {
			log := s.shards[m.h>>memShardShift].logs[m.h]
			log[len(log)-1] = m.newest
		}
	}
}

// shardOrder inserts shard i into order, the ascending shard indexes that
// takeMany locks (in that order, so that concurrent takes never deadlock),
// unless it holds i already. It runs once per ask, rather than once per
// shard: under Yaegi every loop iteration costs. j is its variable, zero
// (see serveLaneTB).
func shardOrder(order []int, i, j int) []int {
	j = len(order)
	for j > 0 && order[j-1] > i {
		j--
	}
	if j > 0 && order[j-1] == i {
		return order
	}
	order = append(order, 0)
	copy(order[j+1:], order[j:])
	order[j] = i
	return order
}

// take1 decides the ask of cost on limit l for key into *d and returns the
// instant it decided at: Take's common case, the Gate's and the Lane's.
// The hash (memHash), the clock reading (memNow) and decide's dispatch are
// inline, as is a sliding_window_log's load and save of its entries, in
// its case: under Yaegi each call, and each value the function reads,
// costs (see decide). Its parameters after d are its variables, which
// callers pass as zero values (see serveLaneTB); ps points to st.
func take1(s *MemoryStore, l *Limit, key string, cost float64, d *Decision,
	h uint64, sh *memShard, sl memSlot, held bool, st State, ps *State, now, exp int64) int64 {
	h = hashString(s.seed, key)
	h ^= l.nsHash
	sh = &s.shards[h>>memShardShift]
	sh.mu.Lock()
	sl, held = sh.slots[h]
	st = State{T: sl.t, A: sl.a, B: sl.b}
	ps = &st
	now = int64(timeSince(s.base))
	now += s.wall
	if s.clock != nil {
		now = s.clock()
	}
	switch l.Algorithm {
	case TokenBucket:
		exp = tokenBucket(l, ps, now, cost, d, 0, 0, 0, 0)
	case LeakyBucket:
		exp = leakyBucket(l, ps, now, cost, d, 0, 0, 0, 0, 0, 0, 0, false)
	case FixedWindow:
		exp = fixedWindow(l, ps, now, cost, d, 0, 0, 0)
	case SlidingWindowLog:
		if held {
			st.Log = sh.logs[h]
		}
		exp = slidingLog(l, ps, now, cost, d, 0, 0, 0, nil)
		if d.Allowed {
			// Before memRoom, which forgets another state (h is not
			// held) if any.
			memPutLog(sh, h, st.Log)
		}
	default:
		exp = slidingCounter(l, ps, now, cost, d, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	}
	if d.Allowed {
		if !held {
			memRoom(s, sh, now)
		}
		sh.slots[h] = memSlot{t: st.T, a: st.A, b: st.B, exp: exp}
		d.mark = mark{t: st.T, a: st.A, ok: true}
	} else if held {
		memTouch(sh, h, sl, l, now)
	}
	sh.mu.Unlock()
	return now
}

// Refund implements Store.
func (s *MemoryStore) Refund(ctx context.Context, asks []Ask, charged []Decision) error {
	for i := range asks {
		a := &asks[i]
		if !charged[i].mark.ok {
			continue
		}
		h := memHash(s, a.Limit, a.Key)
		sh := &s.shards[h>>memShardShift]
		sh.mu.Lock()
		if _, held := sh.slots[h]; held {
			now := memNow(s)
			var st State
			memLoad(sh, h, a.Limit, &st)
			st = a.Limit.Refund(st, now, a.Cost, charged[i])
			memSave(s, sh, h, a.Limit, &st, expiry(a.Limit, &st), now)
		}
		sh.mu.Unlock()
	}
	return nil
}
