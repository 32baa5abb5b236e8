package inspect

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/resp"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The helpers of core's tests that this package's tests use, written again
// against core's exported API.

// confEpoch is the instant at which the tests start their clocks:
// 2023-11-14T22:14:00Z, a realistic Unix time aligned to the minute, as
// core's conformance suite starts them.
const confEpoch = int64(1700000040) * int64(time.Second)

// fakeClock is a settable core.Clock for tests.
type fakeClock struct {
	mu  sync.Mutex
	now int64
}

// Now returns the current instant in nanoseconds; pass c.Now as a Clock.
func (c *fakeClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock by d (backwards when d < 0).
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += int64(d)
	c.mu.Unlock()
}

// redisNonce keeps keys of this process apart from earlier runs'.
var redisNonce = strconv.FormatInt(time.Now().UnixNano(), 36)

// newRespClient connects to addr with a pool of poolSize connections,
// closed by t.Cleanup.
func newRespClient(t *testing.T, addr string, poolSize int) *resp.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := resp.New(ctx, resp.Options{Addr: addr, PoolSize: poolSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// newTestRedisStore returns a store on client with the default prefix and
// digested keys, deciding at clock's instants (Redis's for nil).
func newTestRedisStore(t *testing.T, client core.Scripter, cluster bool, clock core.Clock) *core.RedisStore {
	t.Helper()
	s, err := core.NewRedisStore(core.RedisConfig{Client: client, Cluster: cluster, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testLimit returns a valid limit of the given parameters.
func testLimit(t *testing.T, name string, alg core.Algorithm, rate string, burst float64, maxDelay time.Duration) *core.Limit {
	t.Helper()
	rt, err := core.ParseRate(rate)
	if err != nil {
		t.Fatal(err)
	}
	l := &core.Limit{Name: name, Algorithm: alg, Rate: rt, Burst: burst, MaxDelay: maxDelay}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return l
}

// testTake takes cost for (l, key) from s and returns the decision.
func testTake(t *testing.T, s core.Store, l *core.Limit, key string, cost float64) core.Decision {
	t.Helper()
	out := make([]core.Decision, 1)
	if err := s.Take(context.Background(), []core.Ask{{Limit: l, Key: key, Cost: cost}}, out); err != nil {
		t.Fatalf("Take: %v", err)
	}
	return out[0]
}

// flightLimit returns a valid limit of k requests in flight, with rate
// ("" for none).
func flightLimit(t *testing.T, name, rate string, k int) *core.Limit {
	t.Helper()
	l := &core.Limit{Name: name, MaxInFlight: k}
	if rate != "" {
		r, err := core.ParseRate(rate)
		if err != nil {
			t.Fatal(err)
		}
		l.Rate = r
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return l
}

// flightGate returns a gate of limits on st whose Redis leases live ttl.
func flightGate(t *testing.T, st core.Store, ttl time.Duration, limits ...*core.Limit) *core.Gate {
	t.Helper()
	g, err := core.NewGate(core.GateConfig{Limits: limits, Store: st, Responder: core.Responder{Headers: core.DefaultHeaders}, LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// inspectorOf returns the Inspector of st, failing t if it has none.
func inspectorOf(t *testing.T, st core.Store) Inspector {
	t.Helper()
	in, ok := Of(st)
	if !ok {
		t.Fatalf("%T: no Inspector", st)
	}
	return in
}

// clusterScripter is a minimal Redis Cluster Scripter for tests: it sends
// each script to the node that owns its keys' slot, per CLUSTER SLOTS, and
// loads scripts on every node.
type clusterScripter struct {
	nodes []*resp.Client
	owner [16384]int // index into nodes, per slot
}

func newClusterScripter(t *testing.T, c *redistest.Cluster) *clusterScripter {
	t.Helper()
	cs := &clusterScripter{}
	index := map[string]int{}
	for i, addr := range c.Addrs {
		cs.nodes = append(cs.nodes, newRespClient(t, addr, 4))
		index[addr] = i
	}
	v, err := cs.nodes[0].Do(context.Background(), "CLUSTER", "SLOTS")
	if err != nil {
		t.Fatal(err)
	}
	ranges, _ := v.([]interface{})
	covered := 0
	for _, r := range ranges {
		f, _ := r.([]interface{})
		if len(f) < 3 {
			t.Fatalf("CLUSTER SLOTS: unexpected entry %v", r)
		}
		master, _ := f[2].([]interface{})
		from, _ := f[0].(int64)
		to, _ := f[1].(int64)
		if len(master) < 2 {
			t.Fatalf("CLUSTER SLOTS: unexpected entry %v", r)
		}
		host, _ := master[0].(string)
		port, _ := master[1].(int64)
		node, ok := index[host+":"+strconv.FormatInt(port, 10)]
		if !ok {
			t.Fatalf("CLUSTER SLOTS: unknown node %v", master)
		}
		for slot := from; slot <= to; slot++ {
			cs.owner[slot] = node
			covered++
		}
	}
	if covered != 16384 {
		t.Fatalf("CLUSTER SLOTS covers %d slots", covered)
	}
	return cs
}

// EvalSha implements core.Scripter on the node of keys' slot.
func (c *clusterScripter) EvalSha(ctx context.Context, sha string, keys, args []string) (interface{}, error) {
	if len(keys) == 0 {
		return nil, errors.New("clusterScripter: no keys")
	}
	slot := resp.KeySlot(keys[0])
	for _, k := range keys[1:] {
		if resp.KeySlot(k) != slot {
			return nil, errors.New("CROSSSLOT Keys in request don't hash to the same slot")
		}
	}
	return c.nodes[c.owner[slot]].EvalSha(ctx, sha, keys, args)
}

// ScriptLoad implements core.Scripter on every node.
func (c *clusterScripter) ScriptLoad(ctx context.Context, script string) (string, error) {
	var sha string
	for _, n := range c.nodes {
		s, err := n.ScriptLoad(ctx, script)
		if err != nil {
			return "", err
		}
		sha = s
	}
	return sha, nil
}
