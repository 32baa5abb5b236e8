package core

import (
	"context"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// TestDecideReturnsExpiry: the expiry decide returns for the next state,
// which the in-memory store keeps, is Limit.Expiry of that state.
func TestDecideReturnsExpiry(t *testing.T) {
	limits := []*model.Limit{
		coretest.Limit(t, "t", model.TokenBucket, "7/s", 3, 0),
		coretest.Limit(t, "t", model.TokenBucket, "6/s", 0, 0),
		coretest.Limit(t, "t", model.LeakyBucket, "5/s", 4, 0),
		coretest.Limit(t, "t", model.LeakyBucket, "3/s", 4, 500*time.Millisecond),
		coretest.Limit(t, "t", model.FixedWindow, "10/m", 0, 0),
		coretest.Limit(t, "t", model.SlidingWindowCounter, "4/s", 0, 0),
		coretest.Limit(t, "t", model.SlidingWindowLog, "3/s", 0, 0),
	}
	costs := []float64{0.5, 1, 1, 2.5}
	rng := rand.New(rand.NewSource(7))
	for _, l := range limits {
		var s model.State
		now := testclock.Epoch
		for step := 0; step < 300; step++ {
			now += rng.Int63n(int64(400*time.Millisecond)) - int64(50*time.Millisecond)
			next := coretest.CopyState(s)
			var d model.Decision
			exp := model.Step(l, &next, now, costs[rng.Intn(len(costs))], &d)
			if want := model.Expires(l, &next); exp != want {
				t.Fatalf("%s %v, step %d: decide returned expiry %d, Expires says %d", l.Algorithm, l.Rate, step, exp, want)
			}
			if d.Allowed {
				s = next
			}
		}
	}
}

// hiddenStore hides a MemoryStore's type from NewGate, so that the gate
// decides through Decide and Store.Take, the general path. It is used as a
// pointer with methods of its own: Yaegi v0.16.1 panics on the simpler
// struct{ Store } stored by value in GateConfig.Store.
type hiddenStore struct{ s *MemoryStore }

func (h *hiddenStore) Take(ctx context.Context, asks []model.Ask, out []model.Decision) error {
	return h.s.Take(ctx, asks, out)
}

func (h *hiddenStore) Refund(ctx context.Context, asks []model.Ask, charged []model.Decision) error {
	return h.s.Refund(ctx, asks, charged)
}

func (h *hiddenStore) Settle(ctx context.Context, asks []model.Ask, charged []model.Decision, actual []float64) error {
	return h.s.Settle(ctx, asks, charged, actual)
}

// TestGateServeFastPathMatchesGeneral: one ask on a MemoryStore, which
// Serve decides on its own path, gets the verdict, status and headers of
// the general path, for every algorithm, admitted, delayed and rejected.
func TestGateServeFastPathMatchesGeneral(t *testing.T) {
	limits := []*model.Limit{
		gateLimit(t, "tb", model.TokenBucket, "3/s", 0),
		gateLimit(t, "fw", model.FixedWindow, "4/m", 0),
		gateLimit(t, "swc", model.SlidingWindowCounter, "4/s", 0),
		gateLimit(t, "swl", model.SlidingWindowLog, "3/s", 0),
		gateLimit(t, "lb", model.LeakyBucket, "1/s", 3),
	}
	for _, mode := range []Mode{Enforce, DryRun} {
		now := testclock.Epoch
		clock := func() int64 { return now }
		fastStore, err := NewMemoryStore(MemoryConfig{MaxKeys: 1024, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		slowStore, err := NewMemoryStore(MemoryConfig{MaxKeys: 1024, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		cfg := GateConfig{Limits: limits, Mode: mode, Clock: clock,
			Responder: answer.Responder{Headers: answer.HeadersIETF | answer.HeadersLegacy | answer.HeadersX}}
		cfg.Store = fastStore
		fast, err := NewGate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Store = &hiddenStore{slowStore}
		slow, err := NewGate(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if fast.mem == nil || slow.mem != nil {
			t.Fatal("the gates do not take the paths under test")
		}
		// A client that has left: a delayed request is cancelled at once.
		gone, cancel := context.WithCancel(context.Background())
		cancel()
		seen := map[Outcome]bool{}
		for step := 0; step < 60; step++ {
			l := limits[step%len(limits)]
			asks := []model.Ask{{Limit: l, Key: "k" + strconv.Itoa(step%2), Cost: 1}}
			var recs [2]*httptest.ResponseRecorder
			var verdicts [2]Verdict
			var oks [2]bool
			for i, g := range []*Gate{fast, slow} {
				recs[i] = httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(gone)
				verdicts[i], oks[i] = g.Serve(recs[i], r, asks)
			}
			if !reflect.DeepEqual(verdicts[0], verdicts[1]) || oks[0] != oks[1] {
				t.Fatalf("mode %d, step %d (%s): fast path %+v %v, general %+v %v", mode, step, l.Name, verdicts[0], oks[0], verdicts[1], oks[1])
			}
			if recs[0].Code != recs[1].Code || !reflect.DeepEqual(recs[0].Header(), recs[1].Header()) {
				t.Fatalf("mode %d, step %d (%s): fast path answered %d %v, general %d %v", mode, step, l.Name, recs[0].Code, recs[0].Header(), recs[1].Code, recs[1].Header())
			}
			seen[verdicts[0].Outcome] = true
			now += int64(90 * time.Millisecond)
		}
		rejected := OutcomeRejected
		if mode == DryRun {
			rejected = OutcomeDryRunRejected
		}
		// A dry run shapes nothing, so nothing waits to be cancelled.
		if !seen[OutcomeAllowed] || !seen[rejected] || seen[OutcomeCancelled] != (mode == Enforce) {
			t.Errorf("mode %d: outcomes %v, want allowed and rejected ones, and cancelled ones only when enforcing", mode, seen)
		}
	}
}

// TestGateServeSystemClock: a gate and store on the system clock (no Clock
// configured) share its reading, and X-RateLimit-Reset is the Unix time
// at which the limit is whole again.
func TestGateServeSystemClock(t *testing.T) {
	l := gateLimit(t, "api", model.TokenBucket, "10/h", 0)
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Responder: answer.Responder{Headers: answer.DefaultHeaders}})
	if err != nil {
		t.Fatal(err)
	}
	if !g.memClock {
		t.Fatal("a gate without Clock or Store does not share its store's clock")
	}
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	before := time.Now().UnixNano()
	rec := httptest.NewRecorder()
	v, ok := g.Serve(rec, httptest.NewRequest(http.MethodGet, "/", nil), asks)
	after := time.Now().UnixNano()
	if !ok || v.Outcome != OutcomeAllowed || v.Decision.Remaining != 9 {
		t.Fatalf("got %+v %v, want allowed with 9 left", v, ok)
	}
	h := rec.Header()
	if got, want := h.Get("RateLimit"), `"api";r=9;t=360`; got != want {
		t.Errorf("RateLimit %q, want %q", got, want)
	}
	// Whole 360 s after the request, in the second that begins then or
	// the next one.
	lo, hi := answer.ResetUnix(before, 360*answer.NanosPerSecond), answer.ResetUnix(after, 360*answer.NanosPerSecond)
	reset, err := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
	if err != nil || reset < lo || reset > hi {
		t.Errorf("X-RateLimit-Reset %q, want between %d and %d", h.Get("X-RateLimit-Reset"), lo, hi)
	}
}
