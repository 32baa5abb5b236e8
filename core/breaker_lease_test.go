package core

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// leaseBreakerGate is a gate on a real Redis of one token bucket with a
// Lease, behind a breaker of 3 failures and a back-off of 100 ms, on a
// clock that the gate, the store's scripts and its leases share (so that
// no lease ends while the test runs: it lasts 500 ms of that clock).
func leaseBreakerGate(t *testing.T, srv *redistest.Server) (*Gate, *Breaker, *testclock.Clock) {
	t.Helper()
	l := coretest.Limit(t, "lease-breaker", model.TokenBucket, "100/s", 100, 0)
	l.Lease = 10
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	clock := testclock.New(testclock.Epoch)
	store, err := redisstore.New(redisstore.Config{Client: resptest.Client(t, srv.Addr, 1), Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	b := &Breaker{Failures: 3, Backoff: 100 * time.Millisecond}
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: store, Breaker: b, Timeout: time.Second, Clock: clock.Now,
		Responder: answer.Responder{Headers: answer.DefaultHeaders, Body: answer.BodyJSON}})
	if err != nil {
		t.Fatal(err)
	}
	return g, b, clock
}

// leaseBreakerPaths are the ways a request reaches a gate of
// leaseBreakerGate: Gate.Decide, and a Traefik Lane, which admits from a
// lease by serveLaneLease while the breaker is closed and otherwise takes
// Gate.Serve. Each returns a function deciding one request of a client
// ("hot" or "cold"), which returns the verdict.
var leaseBreakerPaths = []struct {
	name string
	path func(t *testing.T, g *Gate) func(client string) Verdict
}{
	{"gate", func(t *testing.T, g *Gate) func(string) Verdict {
		return func(client string) Verdict {
			return g.Decide(context.Background(), []model.Ask{{Limit: g.cfg.Limits[0], Key: coretest.Nonce + "/" + client, Cost: 1}})
		}
	}},
	{"lane", func(t *testing.T, g *Gate) func(string) Verdict {
		spec, err := keyspec.Parse(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		var seen []Verdict
		lane := NewLane(LaneConfig{Gate: g, Asks: []LaneAsk{{Limit: g.cfg.Limits[0], Cost: 1}}, Specs: []*keyspec.Spec{spec},
			Prefix: coretest.Nonce + "\x00", Watch: true, Observe: func(v *Verdict) { seen = append(seen, *v) }})
		if !lane.leased {
			t.Fatal("the lane does not take serveLaneLease's path")
		}
		remotes := map[string]string{"hot": "192.0.2.1:1000", "cold": "192.0.2.2:1000"}
		return func(client string) Verdict {
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			r.RemoteAddr = remotes[client]
			seen = seen[:0]
			ServeLane(lane, &countingHandler{}, httptest.NewRecorder(), r)
			if len(seen) != 1 {
				t.Fatalf("%d verdicts observed of one request", len(seen))
			}
			return seen[0]
		}
	}},
}

// fromLease fails t unless v admitted a request without a store error: with
// Redis down, only a lease the instance holds can have.
func fromLease(t *testing.T, v Verdict, what string) {
	t.Helper()
	if v.Outcome != OutcomeAllowed || v.Err != nil {
		t.Fatalf("%s: outcome %v, error %v; want admitted from the lease held", what, v.Outcome, v.Err)
	}
}

// askedRedis fails t unless v is the verdict of a request that asked
// Redis, stopped, and failed: not ErrBreakerOpen.
func askedRedis(t *testing.T, v Verdict, what string) {
	t.Helper()
	if v.Err == nil || errors.Is(v.Err, ErrBreakerOpen) {
		t.Fatalf("%s: error %v, want Redis's", what, v.Err)
	}
}

// TestBreakerIgnoresLeases: a request admitted from a lease, which asks
// Redis nothing, tells the breaker nothing, through a Gate and through a
// Lane. With Redis stopped, failures interleaved with such requests open
// the breaker at the third (their count is not reset); once it is open, a
// probe answered from a lease leaves it open, with no script run, and
// lets the next request probe Redis at once; only an answer of Redis
// closes it.
func TestBreakerIgnoresLeases(t *testing.T) {
	for _, p := range leaseBreakerPaths {
		t.Run(p.name, func(t *testing.T) {
			srv := redistest.Start(t, redistest.Options{})
			g, b, clock := leaseBreakerGate(t, srv)
			decide := p.path(t, g)
			// Two requests 10 ms apart: the second takes a lease of 10.
			for i := 0; i < 2; i++ {
				if v := decide("hot"); v.Outcome != OutcomeAllowed || v.Err != nil {
					t.Fatalf("request %d with Redis up: %+v", i, v)
				}
				clock.Advance(10 * time.Millisecond)
			}
			srv.Stop()
			for i := 0; i < 3; i++ {
				askedRedis(t, decide("cold"), "failure "+strconv.Itoa(i+1))
				if i == 2 {
					break
				}
				fromLease(t, decide("hot"), "with Redis stopped")
				if s := b.State(); s != BreakerClosed {
					t.Fatalf("after %d failures: breaker %v, want closed", i+1, s)
				}
			}
			if s := b.State(); s != BreakerOpen {
				t.Fatalf("after 3 failures between requests admitted from a lease: breaker %v, want open", s)
			}

			clock.Advance(b.Backoff)
			fromLease(t, decide("hot"), "the probe")
			if s := b.State(); s == BreakerClosed {
				t.Fatal("a probe answered from a lease, with Redis stopped, closed the breaker")
			}
			// The probe asked nothing of Redis: the next request probes it.
			askedRedis(t, decide("cold"), "the request after a probe answered from a lease")
			if s := b.State(); s != BreakerOpen {
				t.Fatalf("after the second probe failed: breaker %v, want open", s)
			}

			srv.Restart(t)
			clock.Advance(b.Backoff)
			calls := srv.ScriptCalls(t)
			fromLease(t, decide("hot"), "the probe after Redis restarted")
			if n := srv.ScriptCalls(t) - calls; n != 0 {
				t.Fatalf("a request admitted from a lease ran %d scripts", n)
			}
			if s := b.State(); s == BreakerClosed {
				t.Fatal("a probe answered from a lease closed the breaker")
			}
			if v := decide("cold"); v.Outcome != OutcomeAllowed || v.Err != nil {
				t.Fatalf("the probe of Redis restarted: %+v", v)
			}
			if s := b.State(); s != BreakerClosed {
				t.Fatalf("after Redis answered the probe: breaker %v, want closed", s)
			}
		})
	}
}
