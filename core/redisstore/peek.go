package redisstore

import (
	"errors"

	"github.com/sluicehq/sluice/core/model"
)

// The hooks through which package core/inspect reads and forgets the
// states of a Store for operators (see peek.go for a MemoryStore's).
// The store also lends inspection Eval (redis.go) and Lua
// (redis_lua.go); UnexpectedReply words the errors of its scripts'
// replies as the store's own.

// ScriptArgs returns the KEYS and ARGV of a script call that decides asks
// as the take script does, on the store's clock, but charges nothing: per
// ask, the key of its state's hash (and of its log's list, that key
// followed by ":log", for a sliding_window_log), and its limit's
// parameters and cost. A script that begins with Lua reads them with
// its function asks. Every limit must limit a rate.
func (s *Store) ScriptArgs(asks []model.Ask) (keys, args []string) {
	return s.scriptArgs(asks, false)
}

// StateKey is the key of the hash that holds the state of l's rate for
// key (and, followed by ":log", of its log's list for a
// sliding_window_log). l must limit a rate.
func (s *Store) StateKey(l *model.Limit, key string) string {
	return s.key(l, key)
}

// LeaseKey is the key of the sorted set of the leases that the requests
// of key in progress hold under l's MaxInFlight, scored by their expiry
// in Unix milliseconds on Redis's clock. l must have a MaxInFlight.
func (s *Store) LeaseKey(l *model.Limit, key string) string {
	return s.key(l.Flight(), key)
}

// KeyPrefix is the beginning of the key of every state of l that the
// store writes: of its rate's hashes, or of its leases' sets for a limit
// of requests in flight only. Each such key ends at the "}" that closes
// its hash tag; a sliding window log's list is that key followed by
// ":log".
func (s *Store) KeyPrefix(l *model.Limit) string {
	if !l.Rated() {
		return s.prefix + "{" + l.Flight().Namespace() + ":"
	}
	return s.prefix + "{" + l.Namespace() + ":"
}

// Cluster reports whether the store's client is a Redis Cluster
// (Config.Cluster).
func (s *Store) Cluster() bool { return s.cluster }

// UnexpectedReply is the error of a reply of another shape than its
// caller expects to the script named script ("peek" for a peek script),
// worded as the store's own: "redis: unexpected reply to the peek
// script: " and the reply's type and, for a short one, its value.
func UnexpectedReply(script string, reply interface{}) error {
	return errors.New("redis: unexpected reply to the " + script + " script: " + describeReply(reply))
}
