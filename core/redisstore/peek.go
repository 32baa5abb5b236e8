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

// StateKey is the key that holds what the store keeps of l for key: the
// hash of the state of l's rate (and, followed by ":log", its log's list,
// for a sliding_window_log), or, for l.Flight(), the sorted set of the
// leases that the requests of key in progress hold under l's MaxInFlight,
// scored by their expiry in Unix milliseconds on Redis's clock. Every key
// of l begins with StateKey(l, "") up to its last ":", where the part of
// the client's key begins, and ends at the "}" that closes its hash tag
// (a log's list, at that key followed by ":log", but for that suffix).
func (s *Store) StateKey(l *model.Limit, key string) string {
	return s.key(l, key)
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
