package model

import (
	"context"
	"time"
)

// Ask is one limit's share of a request: charge Cost to Limit under Key.
type Ask struct {
	Limit *Limit
	// Key identifies the client within the limit, as built by a [keyspec.Spec]
	// or a host's placeholders. Stores namespace it by the limit and bound
	// its length, so it may be any string.
	Key string
	// Cost is what the request is charged when admitted: positive, or
	// zero for a limit that takes its cost from the response (CostHeader,
	// CostBytes), whose settlement then charges it all.
	Cost float64
}

// Store keeps the state of every (limit, key) and applies decisions to it
// atomically.
type Store interface {
	// Take decides every ask and writes the decisions to out[:len(asks)].
	// If all of them allow, every cost is charged; if any rejects, nothing
	// is charged (the other decisions then report what they would have
	// done). Take returns an error only when it could not decide, in which
	// case out is unspecified and nothing was charged.
	Take(ctx context.Context, asks []Ask, out []Decision) error
	// Refund gives back the costs of asks that Take charged but whose
	// requests did not proceed, such as a leaky_bucket wait cancelled by
	// the client: charged[i] is the Decision that Take returned for
	// asks[i]. Each state is changed as Settle says: never to more
	// capacity than had the request not been admitted, and never so as to
	// let a later request proceed sooner than the limit allows (a
	// cancelled wait that requests queued behind leaves its slot taken).
	Refund(ctx context.Context, asks []Ask, charged []Decision) error
	// Settle settles the admissions of asks that Take charged once their
	// actual costs are known, actual[i] for asks[i] (charged asks[i].Cost,
	// as charged[i] marks): each state is changed as model.Settle says,
	// charged the difference whatever its capacity when the actual cost
	// is more, given it back as Refund does when less.
	// Asks whose decision charged nothing are left alone. Refund is
	// Settle at an actual cost of zero.
	Settle(ctx context.Context, asks []Ask, charged []Decision, actual []float64) error
}

// Scripter runs Lua scripts on a Redis server or cluster. It is the whole of
// what the Redis store needs from a client: core's stdlib RESP client
// (package resp) implements it for the Traefik plugin, and the Caddy module
// adapts go-redis to it, so script text and reply decoding exist once.
//
// Replies are decoded as: integer → int64, simple or bulk string → string,
// array → []interface{}, nil bulk or nil array → nil. A Redis error reply is
// returned as an error whose message is the reply text, starting with its
// code ("NOSCRIPT No matching script...").
type Scripter interface {
	// EvalSha runs the script whose SHA-1 is sha with the given keys and
	// arguments (EVALSHA). In a cluster, keys decide the node.
	EvalSha(ctx context.Context, sha string, keys []string, args []string) (interface{}, error)
	// ScriptLoad loads script (SCRIPT LOAD) on every node that may run it
	// and returns its SHA-1.
	ScriptLoad(ctx context.Context, script string) (string, error)
}

// SlotStore is a Store that also counts requests in flight, for limits
// with MaxInFlight: core's MemoryStore exactly, its redisstore.Store by leases
// that expire. asks are of flight limits (Limit.Flight); lease names the
// request's slots, and ttl is how long a Redis lease lives without
// renewal.
type SlotStore interface {
	// AcquireSlots takes a slot of every ask for lease if each has one
	// free, else none, and writes each ask's decision to out.
	AcquireSlots(ctx context.Context, asks []Ask, lease string, ttl time.Duration, out []Decision) error
	// ReleaseSlots gives back the slots of lease.
	ReleaseSlots(ctx context.Context, asks []Ask, lease string) error
	// RenewSlots extends the slots of lease to ttl from now; a memory
	// store's never expire.
	RenewSlots(ctx context.Context, asks []Ask, lease string, ttl time.Duration) error
}
