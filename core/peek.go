package core

import (
	"github.com/sluicehq/sluice/core/model"
)

// The hooks through which package core/inspect reads and forgets the
// states of a MemoryStore for operators, outside core so that the Traefik
// plugin, which never inspects, does not load that code under Yaegi; the
// redisstore.Store's are in redis_peek.go.

// PeekState returns a copy of the state of l's rate that s holds for key,
// read under its shard's lock at the hash Take uses, now, the store's
// instant at the read, and the instant until which l's Penalty holds the
// key out (zero or past when it does not). live reports whether s holds a
// state there that has not expired at now (its model.Expires is
// after now); the state is the zero State when it does not. l must limit a rate
// (Limit.Rated).
func (s *MemoryStore) PeekState(l *model.Limit, key string) (st model.State, live bool, now, until int64) {
	h := s.hash(l, key)
	sh := s.shard(h)
	sh.mu.Lock()
	st, live = sh.load(h, l)
	// Take may write a full log's newest entry in place.
	st.Log = append([]model.LogEntry(nil), st.Log...)
	exp, until := sh.slots[h].exp, sh.slots[h^penaltyBit].t
	now = s.now()
	sh.mu.Unlock()
	if !live || exp <= now {
		return model.State{}, false, now, until
	}
	return st, true, now, until
}

// DeleteState forgets the state of l's rate that s holds for key, and
// its penalty, so that its next request finds the limit whole, and
// reports whether either was live (see PeekState). l must limit a rate.
func (s *MemoryStore) DeleteState(l *model.Limit, key string) bool {
	h := s.hash(l, key)
	sh := s.shard(h)
	sh.mu.Lock()
	sl, held := sh.slots[h]
	pen := sh.slots[h^penaltyBit]
	delete(sh.slots, h)
	delete(sh.logs, h)
	delete(sh.slots, h^penaltyBit)
	now := s.now()
	sh.mu.Unlock()
	return held && sl.exp > now || pen.exp > now
}

// HeldSlots is the number of in-flight slots that the requests of key in
// progress hold under l's MaxInFlight; zero for a limit without one.
func (s *MemoryStore) HeldSlots(l *model.Limit, key string) int {
	if l.Flight() == nil {
		return 0
	}
	h, t := s.hash(l.Flight(), key), s.flight
	t.mu.Lock()
	held := t.held[h]
	t.mu.Unlock()
	return held
}
