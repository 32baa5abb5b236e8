package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core/model"
)

// In-flight slots in Redis are leases. The slots of (flight limit, key)
// are a sorted set at the key's Redis name (Store.key, so digested like a
// rate's, in the namespace "<name>:in_flight"), whose members are the
// requests' lease names scored by their expiry, in milliseconds of
// Redis's clock (TIME). Taking a slot removes the expired leases and adds
// the request's if fewer than MaxInFlight remain, for every ask of the
// call or none; releasing removes it (ZREM); renewing sets its expiry
// (ZADD), so that a lease whose request outlives its time to live is kept,
// while the lease of a request whose proxy died expires. Renewing adds the
// lease if the set lacks it: a request in progress counts, whether Redis
// lost its lease (it restarted, or the lease expired while Redis could
// not be reached) or never had it (the fallback store took the slot
// during an outage). The set itself expires when its last lease could
// (PEXPIRE), so idle keys cost nothing.

// luaLeaseClock reads Redis's clock in milliseconds, the leases' scores,
// and the time to live ARGV[2] in milliseconds; ARGV[1] is the lease.
const luaLeaseClock = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local lease, ttl = ARGV[1], tonumber(ARGV[2])
local function keep(key)
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end
`

// redisAcquireScript takes a slot of every key for the lease if each key
// has fewer live leases than its ARGV[2+i], or none, and returns how many
// live leases each key held before, separated by spaces.
const redisAcquireScript = luaLeaseClock + `
local held, all = {}, true
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  held[i] = redis.call('ZCARD', key)
  if held[i] >= tonumber(ARGV[2 + i]) then all = false end
end
if all then
  for i, key in ipairs(KEYS) do
    redis.call('ZADD', key, now + ttl, lease)
    keep(key)
  end
end
return table.concat(held, ' ')
`

// redisRenewScript sets the lease's expiry to ttl from now in every key,
// adding it where it is missing.
const redisRenewScript = luaLeaseClock + `
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, now + ttl, lease)
  keep(key)
end
return 0
`

// redisReleaseScript removes the lease from every key.
const redisReleaseScript = `
for _, key in ipairs(KEYS) do redis.call('ZREM', key, ARGV[1]) end
return 0
`

var (
	redisAcquire = NewScript(redisAcquireScript)
	redisRenew   = NewScript(redisRenewScript)
	redisRelease = NewScript(redisReleaseScript)
)

// AcquireSlots implements model.SlotStore. In a Cluster, asks whose keys fall in
// several hash slots are taken slot by slot; at the first refusal or
// failure the leases already taken are released.
func (s *Store) AcquireSlots(ctx context.Context, asks []model.Ask, lease string, ttl time.Duration, out []model.Decision) error {
	var groups [][]int
	if s.cluster && len(asks) > 1 {
		groups = s.slotGroups(asks)
	}
	if len(groups) < 2 {
		return acquireLeases(s, ctx, asks, lease, ttl, out)
	}
	for i, g := range groups {
		dec := make([]model.Decision, len(g))
		err := acquireLeases(s, ctx, pickAsks(asks, g), lease, ttl, dec)
		all := err == nil
		for j, k := range g {
			out[k] = dec[j]
			all = all && dec[j].Allowed
		}
		if all {
			continue
		}
		for _, taken := range groups[:i] {
			_ = evalLeases(s, ctx, redisRelease, pickAsks(asks, taken), lease, 0) // or it expires
		}
		if err != nil {
			return err
		}
		// The slots of the groups not asked would have been granted, as
		// far as this request can tell; classify reports a refusal.
		for _, rest := range groups[i+1:] {
			for _, k := range rest {
				out[k] = model.FlightDecision(asks[k].Limit, 0)
			}
		}
		return nil
	}
	return nil
}

// ReleaseSlots implements model.SlotStore.
func (s *Store) ReleaseSlots(ctx context.Context, asks []model.Ask, lease string) error {
	return s.eachSlot(asks, func(sub []model.Ask) error { return evalLeases(s, ctx, redisRelease, sub, lease, 0) })
}

// RenewSlots implements model.SlotStore.
func (s *Store) RenewSlots(ctx context.Context, asks []model.Ask, lease string, ttl time.Duration) error {
	return s.eachSlot(asks, func(sub []model.Ask) error { return evalLeases(s, ctx, redisRenew, sub, lease, ttl) })
}

// eachSlot calls f with the asks of each Cluster hash slot, or with all
// of them on a standalone server, and returns the first error after
// calling it for every slot.
func (s *Store) eachSlot(asks []model.Ask, f func([]model.Ask) error) error {
	if !s.cluster || len(asks) < 2 {
		return f(asks)
	}
	var first error
	for _, g := range s.slotGroups(asks) {
		if err := f(pickAsks(asks, g)); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// acquireLeases runs the acquire script once for asks and decodes the
// decisions into out.
func acquireLeases(s *Store, ctx context.Context, asks []model.Ask, lease string, ttl time.Duration, out []model.Decision) error {
	keys, args := leaseArgs(s, asks, lease, ttl)
	for i := range asks {
		args = append(args, strconv.Itoa(asks[i].Limit.MaxInFlight))
	}
	reply, err := s.Eval(ctx, redisAcquire, keys, args)
	if err != nil {
		return err
	}
	text, ok := reply.(string)
	fields := strings.Fields(text)
	if !ok || len(fields) != len(asks) {
		return fmt.Errorf("redis: unexpected reply to the acquire script: %s, want %d counts", describeReply(reply), len(asks))
	}
	for i, f := range fields {
		held, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("redis: unexpected reply to the acquire script: %s: %w", describeReply(reply), err)
		}
		out[i] = model.FlightDecision(asks[i].Limit, held)
	}
	return nil
}

// evalLeases runs the renew or the release script once for asks.
func evalLeases(s *Store, ctx context.Context, script *Script, asks []model.Ask, lease string, ttl time.Duration) error {
	keys, args := leaseArgs(s, asks, lease, ttl)
	_, err := s.Eval(ctx, script, keys, args)
	return err
}

// leaseArgs builds the KEYS of a lease script call, one sorted set per
// ask, and its first two ARGV: the lease and the time to live in
// milliseconds (at least 1).
func leaseArgs(s *Store, asks []model.Ask, lease string, ttl time.Duration) (keys, args []string) {
	keys = make([]string, len(asks))
	for i := range asks {
		keys[i] = s.key(asks[i].Limit, asks[i].Key)
	}
	ms := int64((ttl + time.Millisecond - 1) / time.Millisecond)
	if ms < 1 {
		ms = 1
	}
	// Not args[0], args[1] = ...: Yaegi leaves args[0] empty.
	args = append(make([]string, 0, 2+len(asks)), lease, strconv.FormatInt(ms, 10))
	return keys, args
}
