package inspect

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
)

// The helpers of this package's tests, on core's exported API; those that
// core's tests share live in internal/testclock and internal/resptest.

// redisNonce keeps keys of this process apart from earlier runs'.
var redisNonce = strconv.FormatInt(time.Now().UnixNano(), 36)

// newTestRedisStore returns a store on client with the default prefix and
// digested keys, deciding at clock's instants (Redis's for nil).
func newTestRedisStore(t *testing.T, client model.Scripter, cluster bool, clock model.Clock) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(redisstore.Config{Client: client, Cluster: cluster, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testLimit returns a valid limit of the given parameters.
func testLimit(t *testing.T, name string, alg model.Algorithm, rate string, burst float64, maxDelay time.Duration) *model.Limit {
	t.Helper()
	return validLimit(t, model.Limit{Name: name, Algorithm: alg, Rate: testRate(t, rate), Burst: burst, MaxDelay: maxDelay})
}

// validLimit returns l once Validate has filled in its defaults, failing t
// if it is not valid.
func validLimit(t *testing.T, l model.Limit) *model.Limit {
	t.Helper()
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return &l
}

// testRate parses rate (model.ParseRate), failing t if it is not one.
func testRate(t *testing.T, rate string) model.Rate {
	t.Helper()
	r, err := model.ParseRate(rate)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// testTake takes cost for (l, key) from s and returns the decision.
func testTake(t *testing.T, s model.Store, l *model.Limit, key string, cost float64) model.Decision {
	t.Helper()
	out := make([]model.Decision, 1)
	if err := s.Take(context.Background(), []model.Ask{{Limit: l, Key: key, Cost: cost}}, out); err != nil {
		t.Fatalf("Take: %v", err)
	}
	return out[0]
}

// flightGate returns a gate of limits on st whose Redis leases live ttl.
func flightGate(t *testing.T, st model.Store, ttl time.Duration, limits ...*model.Limit) *core.Gate {
	t.Helper()
	g, err := core.NewGate(core.GateConfig{Limits: limits, Store: st, Responder: answer.Responder{Headers: answer.DefaultHeaders}, LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// inspectorOf returns the Inspector of st, failing t if it has none.
func inspectorOf(t *testing.T, st model.Store) Inspector {
	t.Helper()
	in, ok := Of(st)
	if !ok {
		t.Fatalf("%T: no Inspector", st)
	}
	return in
}
