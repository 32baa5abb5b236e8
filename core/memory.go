package core

import (
	"context"
	"errors"
	"hash/maphash"
	"sync"
)

// DefaultMaxKeys is the MemoryStore capacity used when MemoryConfig.MaxKeys
// is zero.
const DefaultMaxKeys = 1000000

const (
	memShards = 64 // a power of two
	memWays   = 8  // slots per bucket
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
	clock   Clock
	seed    maphash.Seed
	buckets uint64 // buckets per shard
	shards  [memShards]memShard
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
	if cfg.Clock == nil {
		cfg.Clock = SystemClock()
	}
	s := &MemoryStore{clock: cfg.Clock, seed: maphash.MakeSeed()}
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

// hash identifies (limit, key). It is never 0, which marks free slots.
func (s *MemoryStore) hash(l *Limit, key string) uint64 {
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

func (s *MemoryStore) shardOf(h uint64) int { return int(h >> 58) } // top 6 bits: 64 shards

// bucket returns the index of the first slot of h's bucket.
func (s *MemoryStore) bucket(h uint64) int { return int(h%s.buckets) * memWays }

// find returns the index of h's slot in sh, or -1.
func (s *MemoryStore) find(sh *memShard, h uint64) int {
	b := s.bucket(h)
	for i := b; i < b+memWays; i++ {
		if sh.slots[i].h == h {
			return i
		}
	}
	return -1
}

// load returns the state of h (the zero State when absent).
func (s *MemoryStore) load(sh *memShard, h uint64, l *Limit) State {
	i := s.find(sh, h)
	if i < 0 {
		return State{}
	}
	sl := &sh.slots[i]
	st := State{T: sl.t, A: sl.a, B: sl.b}
	if l.Algorithm == SlidingWindowLog {
		st.Log = sh.logs[h]
	}
	return st
}

// save stores st as h's state, taking a slot from the bucket if h has none:
// a free one, else an expired one, else the one that expires first.
func (s *MemoryStore) save(sh *memShard, h uint64, l *Limit, st State, now int64) {
	i := s.find(sh, h)
	if i < 0 {
		b := s.bucket(h)
		i = b
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
	}
	sh.slots[i] = memSlot{h: h, t: st.T, a: st.A, b: st.B, exp: l.Expiry(st)}
	if l.Algorithm == SlidingWindowLog {
		if len(st.Log) == 0 {
			delete(sh.logs, h)
		} else {
			sh.logs[h] = st.Log
		}
	}
}

// maxAsks is how many asks one Take handles without allocating.
const maxAsks = 8

// Take implements Store. It locks the shards of all asks (in shard order, so
// concurrent calls cannot deadlock), decides each ask on one clock reading,
// and saves the new states only if every ask is allowed.
func (s *MemoryStore) Take(ctx context.Context, asks []Ask, out []Decision) error {
	if len(asks) == 1 {
		// The common case: one limit, one shard, no bookkeeping.
		a := &asks[0]
		h := s.hash(a.Limit, a.Key)
		sh := &s.shards[s.shardOf(h)]
		sh.mu.Lock()
		now := s.clock()
		st, d := a.Limit.Decide(s.load(sh, h, a.Limit), now, a.Cost)
		if d.Allowed {
			s.save(sh, h, a.Limit, st, now)
		}
		sh.mu.Unlock()
		out[0] = d
		return nil
	}
	var hb [maxAsks]uint64
	var stb [maxAsks]State
	hs, sts := hb[:0], stb[:0]
	if len(asks) > maxAsks {
		hs, sts = make([]uint64, 0, len(asks)), make([]State, 0, len(asks))
	}
	var locked uint64 // bit i: shard i is to be locked
	for i := range asks {
		h := s.hash(asks[i].Limit, asks[i].Key)
		hs = append(hs, h)
		locked |= 1 << uint(s.shardOf(h))
	}
	s.lockShards(locked)
	now := s.clock()
	all := true
	for i := range asks {
		a := &asks[i]
		sh := &s.shards[s.shardOf(hs[i])]
		st, d := a.Limit.Decide(s.load(sh, hs[i], a.Limit), now, a.Cost)
		sts = append(sts, st)
		out[i] = d
		all = all && d.Allowed
	}
	if all {
		for i := range asks {
			s.save(&s.shards[s.shardOf(hs[i])], hs[i], asks[i].Limit, sts[i], now)
		}
	}
	s.unlockShards(locked)
	return nil
}

// Refund implements Store.
func (s *MemoryStore) Refund(ctx context.Context, asks []Ask) error {
	for i := range asks {
		a := &asks[i]
		h := s.hash(a.Limit, a.Key)
		sh := &s.shards[s.shardOf(h)]
		sh.mu.Lock()
		if s.find(sh, h) >= 0 {
			now := s.clock()
			s.save(sh, h, a.Limit, a.Limit.Refund(s.load(sh, h, a.Limit), now, a.Cost), now)
		}
		sh.mu.Unlock()
	}
	return nil
}

func (s *MemoryStore) lockShards(set uint64) {
	for i := 0; i < memShards; i++ {
		if set&(uint64(1)<<uint(i)) != 0 { // typed: Yaegi v0.16.1 panics on an untyped 1 here
			s.shards[i].mu.Lock()
		}
	}
}

func (s *MemoryStore) unlockShards(set uint64) {
	for i := 0; i < memShards; i++ {
		if set&(uint64(1)<<uint(i)) != 0 {
			s.shards[i].mu.Unlock()
		}
	}
}
