package core

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/model"
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
	Clock model.Clock
}

// MemoryStore is an in-process Store. Its memory grows with the states it
// holds and is bounded by MaxKeys: states live in hash maps divided among
// 64 shards with a mutex each, so a decision locks only the shards of its
// keys, and each shard holds at most MaxKeys/64 states (60 to 100 bytes
// each, as the maps' tables fill and split: BenchmarkMemoryBytesPerKey,
// plus 16 bytes per sliding_window_log entry). Go maps do not give
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
	clock model.Clock // nil: the system clock, read from the embedded systemClock
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
	slots map[uint64]memSlot          // states by hash
	logs  map[uint64][]model.LogEntry // sliding_window_log entries, by hash
	_     [40]byte                    // keeps hot mutexes on separate cache lines
}

// memSlot is one stored State.
type memSlot struct {
	t    int64
	a, b float64
	exp  int64 // model.Expires of the state
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
		s.shards[i].logs = make(map[uint64][]model.LogEntry)
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

// hash identifies (limit, key); its top bits choose the shard.
func (s *MemoryStore) hash(l *model.Limit, key string) uint64 {
	return maphash.String(s.seed, key) ^ l.Hash
}

// shard is the shard of hash h.
func (s *MemoryStore) shard(h uint64) *memShard { return &s.shards[h>>memShardShift] }

// now reads the store's clock.
func (s *MemoryStore) now() int64 {
	if s.clock == nil {
		return s.systemClock.read()
	}
	return s.clock()
}

// load returns the state of h (the zero State when absent) and whether sh
// holds one. sh's mutex is held.
func (sh *memShard) load(h uint64, l *model.Limit) (model.State, bool) {
	sl, held := sh.slots[h]
	st := model.State{T: sl.t, A: sl.a, B: sl.b}
	if held && l.Algorithm == model.SlidingWindowLog {
		st.Log = sh.logs[h]
	}
	return st, held
}

// save stores *st, which expires at exp, as h's state in sh, whose mutex
// is held. held says whether sh holds a state of h now, at the call: if
// not, room makes room for it first.
func (s *MemoryStore) save(sh *memShard, h uint64, l *model.Limit, st *model.State, exp, now int64, held bool) {
	if l.Algorithm == model.SlidingWindowLog {
		// Before room, which may forget another state of sh.
		putLog(sh, h, st.Log)
	}
	if !held {
		room(s, sh, now)
	}
	sh.slots[h] = memSlot{t: st.T, a: st.A, b: st.B, exp: exp}
}

// keep keeps the state of h that l held when it rejected a request at
// now, for l.keep at least, as if the request had just spent the whole
// capacity, and a nanosecond more, to outlive the states of new keys made
// at the same instant: the key is being limited, and a flood of new keys,
// which evicts the states closest to expiring first (room), must not
// forget it while it keeps asking, which would hand it the capacity
// again. sh's mutex is held.
func (sh *memShard) keep(h uint64, l *model.Limit, now int64) {
	sl, held := sh.slots[h]
	if until := now + l.Keep + 1; held && sl.exp < until {
		sl.exp = until
		sh.slots[h] = sl
	}
}

// room prepares sh, a shard of s whose mutex is held, for one new state
// at now. It examines up to memSample states and forgets the first one
// expired for memGrace, so that while new keys arrive, states of keys never
// seen again do not outlive their expiry by long. (The grace keeps what a
// clock that steps back a little, such as another instance's, still
// counts.) At the cap, if none of them has expired, it forgets the one of
// them that expires first: the least valuable, since forgetting a state
// hands its key a fresh one, and the state closest to expiring is closest
// to fresh. Below the cap no live state is forgotten. It is a function,
// like putLog, for the Traefik lane's callers.
func room(s *MemoryStore, sh *memShard, now int64) {
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

// putLog stores the sliding_window_log entries of h in sh. It is a
// function, not a method, so that the Traefik lane's callers pay less for
// its call under Yaegi.
func putLog(sh *memShard, h uint64, log []model.LogEntry) {
	if len(log) == 0 {
		delete(sh.logs, h)
	} else {
		sh.logs[h] = log
	}
}

// Take implements Store. It locks the shards of all asks (in shard order, so
// concurrent calls cannot deadlock), decides each ask on one clock reading,
// and saves the new states only if every ask is allowed.
func (s *MemoryStore) Take(ctx context.Context, asks []model.Ask, out []model.Decision) error {
	if len(asks) == 1 {
		s.take1(&asks[0], &out[0])
	} else {
		s.takeMany(asks, out)
	}
	return nil
}

// take1 decides one ask into *d and returns the instant it decided at:
// Take's common case, and Gate.Serve's.
func (s *MemoryStore) take1(a *model.Ask, d *model.Decision) int64 {
	if a.Limit.Penalty != 0 {
		return s.takePenalised(a, d)
	}
	h := s.hash(a.Limit, a.Key)
	sh := s.shard(h)
	sh.mu.Lock()
	st, held := sh.load(h, a.Limit)
	now := s.now()
	exp := model.Step(a.Limit, &st, now, a.Cost, d)
	if d.Allowed {
		s.save(sh, h, a.Limit, &st, exp, now, held)
		d.Mark = model.Mark{T: st.T, A: st.A, OK: true}
	} else if held {
		sh.keep(h, a.Limit, now)
	}
	sh.mu.Unlock()
	return now
}

// maxAsks is how many asks takeMany handles without allocating.
const maxAsks = 8

// memAsk is what takeMany holds of one ask: its hash, the state decided
// and its expiry, and whether the ask's log was full (MaxLogQuota
// entries) when loaded, with its newest entry then: slidingLog merges an
// admission into that entry in place, the only element of a stored log
// that a decision writes, which takeMany puts back when the asks are
// not saved.
type memAsk struct {
	h      uint64
	exp    int64
	st     model.State
	full   bool
	newest model.LogEntry
}

// takePenalised is take1 for an ask of a limit with a Penalty, which
// takeMany decides: it restores a full sliding_window_log that an
// admission the penalty refuses has written (see memAsk).
func (s *MemoryStore) takePenalised(a *model.Ask, d *model.Decision) int64 {
	out := make([]model.Decision, 1)
	now := s.takeMany([]model.Ask{*a}, out)
	*d = out[0]
	return now
}

// penaltyBit marks the hash under which a shard holds the penalty of
// the key of a hash h, h^penaltyBit (in the shard of h): a memSlot whose
// t and exp are the instant the penalty ends.
const penaltyBit = 1

// penalise applies the penalty of l, a limit with a Penalty, to d, the
// decision of its algorithm at now for the key of hash h, in sh, the
// shard of h, whose mutex is held (see model.Penalise), and saves a
// penalty that d starts.
func penalise(s *MemoryStore, sh *memShard, h uint64, l *model.Limit, now int64, d *model.Decision) {
	sl, held := sh.slots[h^penaltyBit]
	if until := model.Penalise(l, d, sl.t, now); until != sl.t {
		if !held {
			room(s, sh, now)
		}
		sh.slots[h^penaltyBit] = memSlot{t: until, exp: until}
	}
}

// takeMany is Take for several asks, and returns the instant it decided
// at.
func (s *MemoryStore) takeMany(asks []model.Ask, out []model.Decision) int64 {
	var msBuf [maxAsks]memAsk
	var orderBuf [maxAsks]int
	ms, order := msBuf[:0], orderBuf[:0]
	if len(asks) > maxAsks {
		ms, order = make([]memAsk, 0, len(asks)), make([]int, 0, len(asks))
	}
	for i := range asks {
		h := s.hash(asks[i].Limit, asks[i].Key)
		ms = append(ms, memAsk{h: h})
		order = shardOrder(order, int(h>>memShardShift))
	}
	for _, i := range order {
		s.shards[i].mu.Lock()
	}
	now := s.now()
	all := true
	for i := range asks {
		a, m := &asks[i], &ms[i]
		m.st, _ = s.shard(m.h).load(m.h, a.Limit)
		if n := len(m.st.Log); n >= model.MaxLogQuota {
			m.full, m.newest = true, m.st.Log[n-1]
		}
		m.exp = model.Step(a.Limit, &m.st, now, a.Cost, &out[i])
		if a.Limit.Penalty != 0 {
			penalise(s, s.shard(m.h), m.h, a.Limit, now, &out[i])
		}
		all = all && out[i].Allowed
	}
	for i := range asks {
		m := &ms[i]
		switch {
		case all:
			// held is looked up anew: an earlier ask may have saved this
			// state (the same hash) or, through room, forgotten it.
			sh := s.shard(m.h)
			_, held := sh.slots[m.h]
			s.save(sh, m.h, asks[i].Limit, &m.st, m.exp, now, held)
			out[i].Mark = model.Mark{T: m.st.T, A: m.st.A, OK: true}
		case m.full:
			// Put back what slidingLog wrote in place (see memAsk).
			// (unless penalise made room by forgetting it)
			if log := s.shard(m.h).logs[m.h]; len(log) > 0 {
				log[len(log)-1] = m.newest
			}
			fallthrough
		default:
			s.shard(m.h).keep(m.h, asks[i].Limit, now)
		}
	}
	for _, i := range order {
		s.shards[i].mu.Unlock()
	}
	return now
}

// shardOrder inserts shard i into order, the ascending shard indexes that
// takeMany locks (in that order, so that concurrent takes never deadlock),
// unless it holds i already.
func shardOrder(order []int, i int) []int {
	j := len(order)
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

// Refund implements Store.
func (s *MemoryStore) Refund(ctx context.Context, asks []model.Ask, charged []model.Decision) error {
	return s.Settle(ctx, asks, charged, make([]float64, len(asks)))
}

// Settle implements Store, each ask under its shard's lock.
func (s *MemoryStore) Settle(ctx context.Context, asks []model.Ask, charged []model.Decision, actual []float64) error {
	for i := range asks {
		a := &asks[i]
		if !charged[i].Mark.OK || actual[i] == a.Cost {
			continue
		}
		h := s.hash(a.Limit, a.Key)
		sh := s.shard(h)
		sh.mu.Lock()
		// A refund needs the state it refunds; a charge makes one.
		if st, held := sh.load(h, a.Limit); held || actual[i] > a.Cost {
			now := s.now()
			model.Settle(a.Limit, &st, now, a.Cost, actual[i], &charged[i].Mark)
			s.save(sh, h, a.Limit, &st, model.Expires(a.Limit, &st), now, held)
		}
		sh.mu.Unlock()
	}
	return nil
}
