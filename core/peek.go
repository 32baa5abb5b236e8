package core

import (
	"errors"

	"github.com/sluicehq/sluice/core/model"
)

// The hooks through which package core/inspect reads and forgets the
// states of a MemoryStore or a RedisStore for operators, outside core so
// that the Traefik plugin, which never inspects, does not load that code
// under Yaegi. The RedisStore also lends inspection Eval (redis.go) and
// RedisLua (redis_lua.go); UnexpectedReply words the errors of its
// scripts' replies as the store's own.

// PeekState returns a copy of the state of l's rate that s holds for key,
// read under its shard's lock at the hash Take uses, and now, the store's
// instant at the read. live reports whether s holds a state there that
// has not expired at now (its Limit.Expiry is after now); the state is
// the zero State when it does not. l must limit a rate (Limit.Rated).
func (s *MemoryStore) PeekState(l *model.Limit, key string) (model.State, bool, int64) {
	h := s.hash(l, key)
	sh := s.shard(h)
	sh.mu.Lock()
	st, held := sh.load(h, l)
	// Take may write a full log's newest entry in place.
	st.Log = append([]model.LogEntry(nil), st.Log...)
	exp := sh.slots[h].exp
	now := s.now()
	sh.mu.Unlock()
	if !held || exp <= now {
		return model.State{}, false, now
	}
	return st, true, now
}

// DeleteState forgets the state of l's rate that s holds for key, so
// that its next request finds the limit whole, and reports whether it was
// live (see PeekState). l must limit a rate.
func (s *MemoryStore) DeleteState(l *model.Limit, key string) bool {
	h := s.hash(l, key)
	sh := s.shard(h)
	sh.mu.Lock()
	sl, held := sh.slots[h]
	delete(sh.slots, h)
	delete(sh.logs, h)
	now := s.now()
	sh.mu.Unlock()
	return held && sl.exp > now
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

// ScriptArgs returns the KEYS and ARGV of a script call that decides asks
// as the take script does, on the store's clock, but charges nothing: per
// ask, the key of its state's hash (and of its log's list, that key
// followed by ":log", for a sliding_window_log), and its limit's
// parameters and cost. A script that begins with RedisLua reads them with
// its function asks. Every limit must limit a rate.
func (s *RedisStore) ScriptArgs(asks []model.Ask) (keys, args []string) {
	return s.scriptArgs(asks, false)
}

// LeaseKey is the key of the sorted set of the leases that the requests
// of key in progress hold under l's MaxInFlight, scored by their expiry
// in Unix milliseconds on Redis's clock. l must have a MaxInFlight.
func (s *RedisStore) LeaseKey(l *model.Limit, key string) string {
	return s.key(l.Flight(), key)
}

// KeyPrefix is the beginning of the key of every state of l that the
// store writes: of its rate's hashes, or of its leases' sets for a limit
// of requests in flight only. Each such key ends at the "}" that closes
// its hash tag; a sliding window log's list is that key followed by
// ":log".
func (s *RedisStore) KeyPrefix(l *model.Limit) string {
	if !l.Rated() {
		return s.prefix + "{" + l.Flight().Namespace() + ":"
	}
	return s.prefix + "{" + l.Namespace() + ":"
}

// Cluster reports whether the store's client is a Redis Cluster
// (RedisConfig.Cluster).
func (s *RedisStore) Cluster() bool { return s.cluster }

// UnexpectedReply is the error of a reply of another shape than its
// caller expects to the script named script ("peek" for a peek script),
// worded as the store's own: "redis: unexpected reply to the peek
// script: " and the reply's type and, for a short one, its value.
func UnexpectedReply(script string, reply interface{}) error {
	return errors.New("redis: unexpected reply to the " + script + " script: " + describeReply(reply))
}
