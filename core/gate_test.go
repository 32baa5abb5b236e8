package core

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/model"
)

// failingStore fails every call, counting them.
type failingStore struct{ calls int }

func (f *failingStore) Take(ctx context.Context, asks []model.Ask, out []model.Decision) error {
	f.calls++
	return errors.New("store down")
}

func (f *failingStore) Refund(ctx context.Context, asks []model.Ask, charged []model.Decision) error {
	return errors.New("store down")
}

func (f *failingStore) Settle(ctx context.Context, asks []model.Ask, charged []model.Decision, actual []float64) error {
	return errors.New("store down")
}

func gateLimit(t *testing.T, name string, alg model.Algorithm, rate string, burst float64) *model.Limit {
	t.Helper()
	r, err := model.ParseRate(rate)
	if err != nil {
		t.Fatal(err)
	}
	l := &model.Limit{Name: name, Algorithm: alg, Rate: r, Burst: burst}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return l
}

func newTestGate(t *testing.T, cfg GateConfig, now *int64) *Gate {
	t.Helper()
	cfg.Clock = func() int64 { return *now }
	if cfg.Store == nil {
		st, err := NewMemoryStore(MemoryConfig{MaxKeys: 1024, Clock: cfg.Clock})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = st
	}
	g, err := NewGate(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGateReportsClosestLimit(t *testing.T) {
	now := int64(1_700_000_040e9)
	ip := gateLimit(t, "ip", model.TokenBucket, "10/s", 0)
	user := gateLimit(t, "user", model.TokenBucket, "100/m", 4)
	g := newTestGate(t, GateConfig{Limits: []*model.Limit{ip, user}}, &now)
	asks := []model.Ask{{Limit: ip, Key: "a", Cost: 1}, {Limit: user, Key: "u", Cost: 1}}
	v := g.Decide(context.Background(), asks)
	if v.Outcome != OutcomeAllowed || v.Decision.Limit != user || v.Decision.Remaining != 3 {
		t.Fatalf("got %v %+v, want allowed reporting user with 3 left", v.Outcome, v.Decision)
	}
	for i := 0; i < 3; i++ {
		g.Decide(context.Background(), asks)
	}
	v = g.Decide(context.Background(), asks)
	if v.Outcome != OutcomeRejected || v.Decision.Limit != user {
		t.Fatalf("got %v %+v, want rejected by user", v.Outcome, v.Decision)
	}
	// The rejection charged nothing to ip: 10 - 4 admitted = 6 left.
	v = g.Decide(context.Background(), asks[:1])
	if v.Decision.Remaining != 5 {
		t.Fatalf("ip remaining after its 5th request = %v, want 5", v.Decision.Remaining)
	}
}

func TestGateDryRunPassesWithoutCharging(t *testing.T) {
	now := int64(0)
	l := gateLimit(t, "api", model.FixedWindow, "2/m", 0)
	g := newTestGate(t, GateConfig{Limits: []*model.Limit{l}, Mode: DryRun}, &now)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	var outcomes []Outcome
	for i := 0; i < 4; i++ {
		rec := httptest.NewRecorder()
		v, ok := g.Serve(rec, httptest.NewRequest("GET", "/", nil), asks)
		if !ok || rec.Code != http.StatusOK {
			t.Fatalf("request %d: dry run blocked it (code %d)", i, rec.Code)
		}
		outcomes = append(outcomes, v.Outcome)
	}
	want := []Outcome{OutcomeAllowed, OutcomeAllowed, OutcomeDryRunRejected, OutcomeDryRunRejected}
	for i := range want {
		if outcomes[i] != want[i] {
			t.Fatalf("outcomes %v, want %v", outcomes, want)
		}
	}
}

func TestGateStoreErrorPolicy(t *testing.T) {
	now := int64(0)
	l := gateLimit(t, "api", model.TokenBucket, "1/s", 0)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	for _, tc := range []struct {
		policy StoreErrorPolicy
		want   Outcome
		code   int
		pass   bool
	}{
		{FailOpen, OutcomeStoreErrorAllow, http.StatusOK, true},
		{FailClosed, OutcomeStoreErrorDeny, http.StatusTooManyRequests, false},
	} {
		g := newTestGate(t, GateConfig{Limits: []*model.Limit{l}, Store: &failingStore{}, OnStoreError: tc.policy,
			Responder: answer.Responder{Headers: answer.HeadersIETF | answer.HeadersLegacy | answer.HeadersX}}, &now)
		rec := httptest.NewRecorder()
		v, ok := g.Serve(rec, httptest.NewRequest("GET", "/", nil), asks)
		if v.Outcome != tc.want || ok != tc.pass || rec.Code != tc.code || v.Err == nil {
			t.Errorf("policy %v: outcome %v pass %v code %d err %v", tc.policy, v.Outcome, ok, rec.Code, v.Err)
		}
		// No quota is known: no X-RateLimit-Limit: 0 or the like.
		if h := rec.Header(); h.Get("X-RateLimit-Limit") != "" || h.Get("RateLimit") != "" {
			t.Errorf("policy %v: quota headers without a quota: %v", tc.policy, h)
		}
	}
}

func TestGateFallbackSharesQuota(t *testing.T) {
	now := int64(0)
	l := gateLimit(t, "api", model.TokenBucket, "10/s", 0)
	local, _ := NewMemoryStore(MemoryConfig{MaxKeys: 64, Clock: func() int64 { return now }})
	g := newTestGate(t, GateConfig{Limits: []*model.Limit{l}, Store: &failingStore{}, Fallback: local, Instances: 5}, &now)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	admitted := 0
	for i := 0; i < 10; i++ {
		v := g.Decide(context.Background(), asks)
		if !v.Fallback || v.Err == nil {
			t.Fatalf("decision %d not from the fallback: %+v", i, v)
		}
		if v.Outcome == OutcomeAllowed {
			admitted++
		}
	}
	if admitted != 2 {
		t.Fatalf("fallback admitted %d of 10, want 10/5 = 2", admitted)
	}
}

func TestGateBreakerStopsCallingStore(t *testing.T) {
	now := int64(0)
	l := gateLimit(t, "api", model.TokenBucket, "1/s", 0)
	fs := &failingStore{}
	g := newTestGate(t, GateConfig{Limits: []*model.Limit{l}, Store: fs, Breaker: &Breaker{Failures: 3, Backoff: time.Second}}, &now)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	for i := 0; i < 10; i++ {
		g.Decide(context.Background(), asks)
	}
	if fs.calls != 3 {
		t.Fatalf("store called %d times, want 3 before the breaker opens", fs.calls)
	}
	v := g.Decide(context.Background(), asks)
	if !errors.Is(v.Err, ErrBreakerOpen) || v.Outcome != OutcomeStoreErrorAllow {
		t.Fatalf("open breaker: %+v", v)
	}
	now += int64(time.Second)
	g.Decide(context.Background(), asks)
	if fs.calls != 4 {
		t.Fatalf("after the back-off the store was called %d times in all, want one probe (4)", fs.calls)
	}
}

func TestGateServeWaitsAndRefundsOnCancel(t *testing.T) {
	now := int64(0)
	l := &model.Limit{Name: "shape", Algorithm: model.LeakyBucket, Rate: model.Rate{Quota: 1, Period: time.Hour}, Burst: 3}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	g := newTestGate(t, GateConfig{Limits: []*model.Limit{l}}, &now)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	if v, ok := g.Serve(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), asks); !ok || v.Delay != 0 {
		t.Fatalf("first request: %+v %v", v, ok)
	}
	// The second must wait an hour; its client has already gone.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	v, ok := g.Serve(httptest.NewRecorder(), r, asks)
	if ok || v.Outcome != OutcomeCancelled || v.Delay != time.Hour {
		t.Fatalf("cancelled wait: %+v %v", v, ok)
	}
	// Its slot was given back: the next request again waits one hour, not two.
	v = g.Decide(context.Background(), asks)
	if v.Delay != time.Hour {
		t.Fatalf("after refund the delay is %v, want 1h", v.Delay)
	}
}

func TestGateServeRejects(t *testing.T) {
	now := int64(1_700_000_040e9)
	l := gateLimit(t, "api", model.TokenBucket, "1/m", 0)
	g := newTestGate(t, GateConfig{Limits: []*model.Limit{l}, Responder: answer.Responder{Headers: answer.DefaultHeaders}}, &now)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	rec := httptest.NewRecorder()
	if _, ok := g.Serve(rec, httptest.NewRequest("GET", "/", nil), asks); !ok || rec.Header().Get("RateLimit") == "" {
		t.Fatalf("first request: pass %v, headers %v", ok, rec.Header())
	}
	rec = httptest.NewRecorder()
	v, ok := g.Serve(rec, httptest.NewRequest("GET", "/", nil), asks)
	if ok || v.Outcome != OutcomeRejected || rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") != "60" {
		t.Fatalf("second request: pass %v code %d headers %v", ok, rec.Code, rec.Header())
	}
}

func TestGateRejectsDuplicateNames(t *testing.T) {
	a := gateLimit(t, "api", model.TokenBucket, "1/s", 0)
	b := gateLimit(t, "api", model.FixedWindow, "1/s", 0)
	if _, err := NewGate(GateConfig{Limits: []*model.Limit{a, b}}); err == nil {
		t.Fatal("two limits named api were accepted")
	}
}

func TestGateDryRunDoesNotShape(t *testing.T) {
	now := int64(0)
	l := &model.Limit{Name: "shape", Algorithm: model.LeakyBucket, Rate: model.Rate{Quota: 1, Period: time.Hour}, Burst: 3}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	g := newTestGate(t, GateConfig{Limits: []*model.Limit{l}, Mode: DryRun}, &now)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	g.Decide(context.Background(), asks)
	v, ok := g.Serve(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), asks)
	if !ok || v.Outcome != OutcomeAllowed || v.Delay != 0 || v.Decision.Delay != time.Hour {
		t.Fatalf("dry run: %+v %v, want allowed at once, reporting the hour it would have waited", v, ok)
	}
}

func TestGateFallbackWindowAlgorithms(t *testing.T) {
	now := int64(0)
	for _, alg := range model.Algorithms {
		l := gateLimit(t, "w", alg, "10/m", 0)
		local, _ := NewMemoryStore(MemoryConfig{MaxKeys: 64, Clock: func() int64 { return now }})
		g := newTestGate(t, GateConfig{Limits: []*model.Limit{l}, Store: &failingStore{}, Fallback: local, Instances: 2}, &now)
		admitted := 0
		for i := 0; i < 10; i++ {
			if v := g.Decide(context.Background(), []model.Ask{{Limit: l, Key: "k", Cost: 1}}); v.Outcome == OutcomeAllowed {
				admitted++
			}
		}
		if admitted != 5 {
			t.Errorf("%s: the fallback admitted %d of 10, want 10/2 = 5", alg, admitted)
		}
	}
}

// TestGateFallbackShareAdmitsOneRequest: a share smaller than one request
// (a built-in-style burst of 1 over 2 instances; 10/m at cost 5 over 3) is
// floored to the request's cost, so the fallback admits, and a window's
// quota likewise.
func TestGateFallbackShareAdmitsOneRequest(t *testing.T) {
	now := int64(0)
	for _, tc := range []struct {
		limit     *model.Limit
		cost      float64
		instances int
	}{
		{gateLimit(t, "tb", model.TokenBucket, "100/s", 1), 1, 2},
		{gateLimit(t, "expensive", model.TokenBucket, "10/m", 0), 5, 3},
		{gateLimit(t, "fw", model.FixedWindow, "1/m", 0), 1, 4},
		{gateLimit(t, "lb", model.LeakyBucket, "1/s", 1), 1, 3},
	} {
		local, _ := NewMemoryStore(MemoryConfig{MaxKeys: 64, Clock: func() int64 { return now }})
		g := newTestGate(t, GateConfig{Limits: []*model.Limit{tc.limit}, Store: &failingStore{}, Fallback: local, Instances: tc.instances,
			MaxCost: map[*model.Limit]float64{tc.limit: tc.cost}}, &now)
		v := g.Decide(context.Background(), []model.Ask{{Limit: tc.limit, Key: "k", Cost: tc.cost}})
		if !v.Fallback || v.Outcome != OutcomeAllowed {
			t.Errorf("%s, cost %v over %d instances: %+v, want admitted by the fallback", tc.limit.Name, tc.cost, tc.instances, v)
		}
		if v = g.Decide(context.Background(), []model.Ask{{Limit: tc.limit, Key: "k", Cost: tc.cost}}); v.Outcome != OutcomeRejected || v.Decision.RetryAfter == model.Never {
			t.Errorf("%s: second request %+v, want rejected with a finite Retry-After", tc.limit.Name, v)
		}
	}
}

// TestGateFallbackIgnoresLease: the local fallback decides in memory and
// ignores a limit's Lease, so a lease above the fallback's share of the
// capacity (burst 100, lease 50, 10 instances: a share of 10) is no error,
// and the fallback admits the share. A share that cannot be valid is
// reported as the limit's, at its index, saying what divided it.
func TestGateFallbackIgnoresLease(t *testing.T) {
	now := int64(0)
	other := gateLimit(t, "other", model.TokenBucket, "100/s", 0)
	l := gateLimit(t, "leased", model.TokenBucket, "100/s", 100)
	l.Lease = 50
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	local, _ := NewMemoryStore(MemoryConfig{MaxKeys: 64, Clock: func() int64 { return now }})
	g := newTestGate(t, GateConfig{Limits: []*model.Limit{other, l}, Store: &failingStore{}, Fallback: local, Instances: 10}, &now)
	admitted := 0
	for i := 0; i < 20; i++ {
		if v := g.Decide(context.Background(), []model.Ask{{Limit: l, Key: "k", Cost: 1}}); v.Fallback && v.Outcome == OutcomeAllowed {
			admitted++
		}
	}
	if admitted != 10 {
		t.Errorf("the fallback admitted %d of 20, want its share of 100/10 = 10", admitted)
	}

	// One request a day over 50,000 instances: a share of 1 refills in
	// 50,000 days, longer than sluice supports.
	daily := gateLimit(t, "daily", model.TokenBucket, "1/d", 0)
	_, err := NewGate(GateConfig{Limits: []*model.Limit{other, daily}, Store: &failingStore{}, Fallback: local, Instances: 50000})
	le, _ := err.(*model.LimitError)
	if le == nil || le.Index != 1 || le.Limit != "daily" || le.Err.Field != "burst" || le.Err.Value != "" ||
		!strings.Contains(le.Err.Reason, "divided among 50000 instances by the local fallback") {
		t.Errorf("a share that cannot be valid: %#v (%v), want a LimitError of limit 1, \"daily\", its burst divided among the instances", err, err)
	}
}

// cancellingStore fails as a store does when its caller's context ends.
type cancellingStore struct{}

func (cancellingStore) Take(ctx context.Context, asks []model.Ask, out []model.Decision) error {
	return ctx.Err()
}

func (cancellingStore) Refund(ctx context.Context, asks []model.Ask, charged []model.Decision) error {
	return nil
}

func (cancellingStore) Settle(ctx context.Context, asks []model.Ask, charged []model.Decision, actual []float64) error {
	return nil
}

func TestGateBreakerIgnoresClientsThatLeave(t *testing.T) {
	now := int64(0)
	l := gateLimit(t, "api", model.TokenBucket, "1/s", 0)
	b := &Breaker{Failures: 2, Backoff: time.Second}
	g := newTestGate(t, GateConfig{Limits: []*model.Limit{l}, Store: cancellingStore{}, Breaker: b}, &now)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for i := 0; i < 5; i++ {
		g.Decide(gone, []model.Ask{{Limit: l, Key: "k", Cost: 1}})
	}
	if b.State() != BreakerClosed {
		t.Fatalf("breaker %v after clients left, want closed", b.State())
	}
}
