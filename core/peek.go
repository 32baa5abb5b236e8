package core

import (
	"github.com/sluicehq/sluice/core/model"
)

// The hooks through which package core/inspect reads and forgets the
// states of a MemoryStore for operators, outside core so that the Traefik
// plugin, which never inspects, does not load that code under Yaegi; the
// redisstore.Store's are in redis_peek.go.

// InspectKey returns a copy of the state of l's rate that s holds for key
// (the zero State when it holds none), read under its shard's lock at the
// hash Take uses; exp, the instant the state expires (its model.Expires;
// zero when s holds none); until, the instant until which l's Penalty
// holds the key out (zero or past when it does not); and now, the store's
// instant at the read. With forget, it then forgets the state and the
// penalty, so that the key's next request finds the limit whole. l must
// limit a rate (Limit.Rated).
func (s *MemoryStore) InspectKey(l *model.Limit, key string, forget bool) (st model.State, exp, until, now int64) {
	h := s.hash(l, key)
	sh := s.shard(h)
	sh.mu.Lock()
	st, _ = sh.load(h, l)
	// Take may write a full log's newest entry in place.
	st.Log = append([]model.LogEntry(nil), st.Log...)
	exp, until = sh.slots[h].exp, sh.slots[h^penaltyBit].t
	if forget {
		delete(sh.slots, h)
		delete(sh.logs, h)
		delete(sh.slots, h^penaltyBit)
	}
	now = s.now()
	sh.mu.Unlock()
	return st, exp, until, now
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
