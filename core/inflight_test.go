package core

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/await"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/resp"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
)

// flightLimit returns a validated limit of k requests in flight, with the
// rate rate ("" for none).
func flightLimit(t *testing.T, name, rate string, k int) *model.Limit {
	t.Helper()
	l := &model.Limit{Name: name, MaxInFlight: k}
	if rate != "" {
		r, err := model.ParseRate(rate)
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

func flightGate(t *testing.T, st model.Store, ttl time.Duration, limits ...*model.Limit) *Gate {
	t.Helper()
	g, err := NewGate(GateConfig{Limits: limits, Store: st, Responder: answer.Responder{Headers: answer.DefaultHeaders}, LeaseTTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestFlightLimitValidate(t *testing.T) {
	for _, c := range []struct {
		l    model.Limit
		want string
	}{
		{model.Limit{Name: "a", MaxInFlight: -1}, `max_in_flight "-1": must not be negative`},
		{model.Limit{Name: "a", MaxInFlight: 2, Algorithm: model.FixedWindow}, "algorithm \"fixed_window\": only a rate has an algorithm"},
		{model.Limit{Name: "a", MaxInFlight: 2, Burst: 3}, "burst: only a rate has a burst"},
		{model.Limit{Name: "a"}, "rate: required (or max_in_flight)"},
	} {
		l := c.l
		if err := l.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.l, err, c.want)
		}
	}
	l := flightLimit(t, "conc", "", 3)
	if l.Rated() || l.Namespace() != "conc:in_flight" {
		t.Errorf("a limit of requests in flight only: Rated %v, Namespace %q", l.Rated(), l.Namespace())
	}
	if both := flightLimit(t, "api", "10/s", 3); !both.Rated() || both.Namespace() != "api:token_bucket" {
		t.Errorf("a limit of a rate and requests in flight: Rated %v, Namespace %q", both.Rated(), both.Namespace())
	}
	if _, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: &failingStore{}}); err == nil || !strings.Contains(err.Error(), "max_in_flight") {
		t.Errorf("a store that cannot count requests in flight: %v", err)
	}
}

// holdAll asks g for n requests of key at once, without releasing any,
// and returns the verdicts.
func holdAll(t *testing.T, g *Gate, l *model.Limit, key string, n int) []Verdict {
	t.Helper()
	vs := make([]Verdict, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		i := i
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			vs[i] = g.Decide(context.Background(), []model.Ask{{Limit: l, Key: key, Cost: 1}})
		}()
	}
	close(start)
	wg.Wait()
	return vs
}

// checkHeld checks that exactly k of vs hold slots and the others were
// rejected, and releases the slots.
func checkHeld(t *testing.T, vs []Verdict, k int) {
	t.Helper()
	held := 0
	for _, v := range vs {
		switch {
		case v.Slots != nil && v.Outcome == OutcomeAllowed:
			held++
			v.Slots.Release()
		case v.Slots == nil && v.Outcome == OutcomeRejected:
			if d := v.Decision; d.RetryAfter != model.FlightRetryAfter || d.Remaining != 0 || d.Quota != float64(k) {
				t.Errorf("a refused slot's decision: %+v", d)
			}
		default:
			t.Errorf("verdict %+v: want allowed with slots or rejected without", v)
		}
	}
	if held != k {
		t.Errorf("%d of %d concurrent requests got a slot, want %d", held, len(vs), k)
	}
}

func TestFlightMemoryKPlusOne(t *testing.T) {
	st, _ := NewMemoryStore(MemoryConfig{})
	l := flightLimit(t, "conc", "", 4)
	g := flightGate(t, st, 0, l)
	checkHeld(t, holdAll(t, g, l, "k", 5), 4)
	if n := st.InFlight(); n != 0 {
		t.Errorf("%d slots held after every release", n)
	}
}

// TestFlightMemoryExact runs 32 goroutines through one key of 3 slots and
// checks that no more than 3 are ever inside at once, that 3 are inside
// at some point, and that every slot is given back.
func TestFlightMemoryExact(t *testing.T) {
	st, _ := NewMemoryStore(MemoryConfig{})
	const k = 3
	workers, rounds := 32, 200
	if testing.Short() { // under Yaegi
		workers, rounds = 8, 25
	}
	l := flightLimit(t, "conc", "", k)
	g := flightGate(t, st, 0, l)
	var inside, most, served int64
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < rounds; j++ {
				v := g.Decide(context.Background(), []model.Ask{{Limit: l, Key: "k", Cost: 1}})
				if v.Slots == nil {
					continue
				}
				n := atomic.AddInt64(&inside, 1)
				for {
					m := atomic.LoadInt64(&most)
					if n <= m || atomic.CompareAndSwapInt64(&most, m, n) {
						break
					}
				}
				atomic.AddInt64(&served, 1)
				time.Sleep(50 * time.Microsecond)
				atomic.AddInt64(&inside, -1)
				v.Slots.Release()
			}
		}()
	}
	wg.Wait()
	t.Logf("memory: %d of %d requests served, at most %d at once (max_in_flight %d)", served, workers*rounds, most, k)
	if most != k {
		t.Errorf("at most %d requests inside at once, want exactly %d", most, k)
	}
	if n := st.InFlight(); n != 0 {
		t.Errorf("%d slots held after every release", n)
	}
}

// TestFlightRefundsRate checks the all-or-nothing rule across a rate and
// the slots: a request refused a slot is not charged to the rate.
func TestFlightRefundsRate(t *testing.T) {
	st, _ := NewMemoryStore(MemoryConfig{})
	rate := gateLimit(t, "rate", model.TokenBucket, "3/h", 0)
	conc := flightLimit(t, "conc", "", 1)
	g := flightGate(t, st, 0, rate, conc)
	asks := []model.Ask{{Limit: rate, Key: "k", Cost: 1}, {Limit: conc, Key: "k", Cost: 1}}
	first := g.Decide(context.Background(), asks)
	if first.Slots == nil || first.Decision.Limit != conc.Flight() {
		t.Fatalf("first request: %+v, want its slot, reported (1 of 1 taken is closest to exhaustion)", first)
	}
	for i := 0; i < 5; i++ {
		if v := g.Decide(context.Background(), asks); v.Outcome != OutcomeRejected || v.Slots != nil {
			t.Fatalf("request %d while the slot is held: %+v", i, v)
		}
	}
	first.Slots.Release()
	first.Slots.Release() // a second release does nothing
	for i := 0; i < 2; i++ {
		v := g.Decide(context.Background(), asks)
		if v.Outcome != OutcomeAllowed {
			t.Fatalf("request %d after the release: %+v; the refused requests were charged to the rate", i, v)
		}
		v.Slots.Release()
	}
	if v := g.Decide(context.Background(), asks); v.Outcome != OutcomeRejected || v.Decision.Limit != rate {
		t.Errorf("fourth admitted request: %+v, want the rate's rejection", v)
	}
	if n := st.InFlight(); n != 0 {
		t.Errorf("%d slots held", n)
	}
}

// TestFlightAnswer checks the 429 of a refused slot and the headers of an
// admitted request: the concurrency policy, a short Retry-After.
func TestFlightAnswer(t *testing.T) {
	st, _ := NewMemoryStore(MemoryConfig{})
	l := flightLimit(t, "conc", "", 2)
	g := flightGate(t, st, 0, l)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	serve := func() (*httptest.ResponseRecorder, Verdict, bool) {
		w := httptest.NewRecorder()
		v, ok := g.Serve(w, httptest.NewRequest("GET", "/", nil), asks)
		return w, v, ok
	}
	w, v1, ok := serve()
	if !ok || w.Header().Get("RateLimit-Policy") != `"conc";q=2;qu="concurrent-requests"` || w.Header().Get("RateLimit") != `"conc";r=1;t=0` ||
		w.Header().Get("X-RateLimit-Limit") != "2" || w.Header().Get("X-RateLimit-Remaining") != "1" {
		t.Errorf("first request: proceed %v, headers %v", ok, w.Header())
	}
	_, v2, _ := serve()
	w, v3, ok := serve()
	if ok || w.Code != http.StatusTooManyRequests || v3.Slots != nil {
		t.Fatalf("third request: proceed %v, status %d", ok, w.Code)
	}
	h := w.Header()
	if h.Get("Retry-After") != "1" || h.Get("RateLimit-Policy") != `"conc";q=2;qu="concurrent-requests"` || h.Get("RateLimit") != `"conc";r=0;t=1` {
		t.Errorf("refused slot's headers: %v", h)
	}
	if body := w.Body.String(); body != `{"error":"rate_limited","retryable":true,"retry_after":1,"policy":"conc"}` {
		t.Errorf("refused slot's body: %s", body)
	}
	v1.Slots.Release()
	v2.Slots.Release()
	if n := st.InFlight(); n != 0 {
		t.Errorf("%d slots held", n)
	}
}

// TestFlightReleasedOnPanic checks that a host deferring Release gives
// the slot back when its handler panics.
func TestFlightReleasedOnPanic(t *testing.T) {
	st, _ := NewMemoryStore(MemoryConfig{})
	l := flightLimit(t, "conc", "", 1)
	g := flightGate(t, st, 0, l)
	func() {
		defer func() { _ = recover() }()
		v, _ := g.Serve(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), []model.Ask{{Limit: l, Key: "k", Cost: 1}})
		defer v.Slots.Release()
		panic("handler")
	}()
	if n := st.InFlight(); n != 0 {
		t.Errorf("%d slots held after a panic", n)
	}
}

// TestFlightCancelledDelay checks that a request whose leaky_bucket delay
// the client cuts short gives its slot back as well as its rate.
func TestFlightCancelledDelay(t *testing.T) {
	st, _ := NewMemoryStore(MemoryConfig{})
	r, _ := model.ParseRate("1/h")
	l := &model.Limit{Name: "lb", Algorithm: model.LeakyBucket, Rate: r, Burst: 2, MaxInFlight: 5}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	g := flightGate(t, st, 0, l)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	v, ok := g.Serve(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), asks)
	v.Slots.Release()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	v, ok = g.Serve(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx), asks)
	if ok || v.Outcome != OutcomeCancelled || v.Slots != nil {
		t.Errorf("cancelled delay: proceed %v, %+v", ok, v)
	}
	if n := st.InFlight(); n != 0 {
		t.Errorf("%d slots held after a cancelled delay", n)
	}
}

// TestFlightNoLeakUnderCancels sends 10,000 requests through Gate.Serve
// into a slow handler, cancelling a random third of them, and checks that
// no slot is held at the end.
func TestFlightNoLeakUnderCancels(t *testing.T) {
	st, _ := NewMemoryStore(MemoryConfig{})
	l := flightLimit(t, "conc", "1000000/s", 8)
	g := flightGate(t, st, 0, l)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v, ok := g.Serve(w, r, []model.Ask{{Limit: l, Key: "k", Cost: 1}})
		defer v.Slots.Release()
		if !ok {
			return
		}
		// Not a select, which Yaegi v0.16.1 mixes up between the
		// workers (see package await).
		await.Sleep(r.Context(), 100*time.Microsecond)
	})
	const workers = 16
	n := int64(10000)
	if testing.Short() { // under Yaegi
		n = 500
	}
	var next int64
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for atomic.AddInt64(&next, 1) <= n {
				ctx, cancel := context.WithCancel(context.Background())
				if time.Now().UnixNano()%3 == 0 {
					cancel()
				}
				h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx))
				cancel()
			}
		}()
	}
	wg.Wait()
	if held := st.InFlight(); held != 0 {
		t.Errorf("%d slots held after %d requests", held, n)
	}
}

func flightRedisStore(t *testing.T) *redisstore.Store {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	return newTestRedisStore(t, resptest.Client(t, srv.Addr, 16), false)
}

func TestFlightRedisKPlusOne(t *testing.T) {
	st := flightRedisStore(t)
	l := flightLimit(t, "conc"+coretest.Nonce, "", 4)
	g := flightGate(t, st, 0, l)
	checkHeld(t, holdAll(t, g, l, "k", 5), 4)
	// Every lease was released: four more fit.
	checkHeld(t, holdAll(t, g, l, "k", 4), 4)
}

// TestFlightRedisLeaseExpires takes a slot and never releases it, as a
// proxy that died would, and measures when the slot is free again on
// Redis's clock.
func TestFlightRedisLeaseExpires(t *testing.T) {
	st := flightRedisStore(t)
	const ttl = 300 * time.Millisecond
	l := flightLimit(t, "lease"+coretest.Nonce, "", 1)
	out := make([]model.Decision, 1)
	ctx := context.Background()
	asks := []model.Ask{{Limit: l.Flight(), Key: "k", Cost: 1}}
	if err := st.AcquireSlots(ctx, asks, "dead", ttl, out); err != nil || !out[0].Allowed {
		t.Fatalf("first lease: %v, %+v", err, out[0])
	}
	start := time.Now()
	for {
		if err := st.AcquireSlots(ctx, asks, "next", ttl, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed {
			break
		}
		if time.Since(start) > 5*ttl {
			t.Fatalf("the lease still held after %v (time to live %v)", time.Since(start), ttl)
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(start)
	t.Logf("a lease never released expired after %v (time to live %v)", took, ttl)
	if took < ttl-20*time.Millisecond {
		t.Errorf("the lease expired after %v, before its time to live %v", took, ttl)
	}
}

// TestFlightRedisRenewal holds a slot through a gate for three times its
// lease's time to live: renewed, it keeps the key's only slot taken.
func TestFlightRedisRenewal(t *testing.T) {
	st := flightRedisStore(t)
	const ttl = 150 * time.Millisecond
	l := flightLimit(t, "renew"+coretest.Nonce, "", 1)
	g := flightGate(t, st, ttl, l)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	v := g.Decide(context.Background(), asks)
	if v.Slots == nil {
		t.Fatalf("first request: %+v", v)
	}
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		if w := g.Decide(context.Background(), asks); w.Outcome != OutcomeRejected {
			t.Fatalf("a second request got the slot of a renewed lease: %+v", w)
		}
		time.Sleep(20 * time.Millisecond)
	}
	v.Slots.Release()
	w := g.Decide(context.Background(), asks)
	if w.Slots == nil {
		t.Fatalf("after the release: %+v", w)
	}
	w.Slots.Release()
}

// TestFlightRedisExact is TestFlightMemoryExact on Redis.
func TestFlightRedisExact(t *testing.T) {
	st := flightRedisStore(t)
	const k = 3
	workers, rounds := 12, 40
	if testing.Short() { // under Yaegi
		workers, rounds = 6, 10
	}
	l := flightLimit(t, "exact"+coretest.Nonce, "", k)
	g := flightGate(t, st, 0, l)
	var inside, most, served int64
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < rounds; j++ {
				v := g.Decide(context.Background(), []model.Ask{{Limit: l, Key: "k", Cost: 1}})
				if v.Slots == nil {
					continue
				}
				n := atomic.AddInt64(&inside, 1)
				for {
					m := atomic.LoadInt64(&most)
					if n <= m || atomic.CompareAndSwapInt64(&most, m, n) {
						break
					}
				}
				atomic.AddInt64(&served, 1)
				time.Sleep(2 * time.Millisecond)
				atomic.AddInt64(&inside, -1)
				v.Slots.Release()
			}
		}()
	}
	wg.Wait()
	t.Logf("redis: %d of %d requests served, at most %d at once (max_in_flight %d)", served, workers*rounds, most, k)
	if most != k {
		t.Errorf("at most %d requests inside at once, want exactly %d", most, k)
	}
}

// TestFlightClientGone checks that a request whose client left while its
// slots were taken goes no further: cancelled, holding nothing, its rate
// refunded.
func TestFlightClientGone(t *testing.T) {
	st, _ := NewMemoryStore(MemoryConfig{})
	l := flightLimit(t, "both", "1/h", 1)
	g := flightGate(t, st, 0, l)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w := httptest.NewRecorder()
	v, ok := g.Serve(w, httptest.NewRequest("GET", "/", nil).WithContext(ctx), asks)
	if ok || v.Outcome != OutcomeCancelled || v.Slots != nil || st.InFlight() != 0 || len(w.Header()) != 0 {
		t.Fatalf("client gone: proceed %v, %+v, %d held, headers %v", ok, v, st.InFlight(), w.Header())
	}
	if v := g.Decide(context.Background(), asks); v.Outcome != OutcomeAllowed {
		t.Errorf("the next request: %+v; the cancelled one was charged to the rate", v)
	} else {
		v.Slots.Release()
	}
}

// downScripter fails every call, as a Redis that is down.
type downScripter struct{}

func (downScripter) EvalSha(ctx context.Context, sha string, keys, args []string) (interface{}, error) {
	return nil, errors.New("connection refused")
}

func (downScripter) ScriptLoad(ctx context.Context, script string) (string, error) {
	return "", errors.New("connection refused")
}

// TestFlightStoreDown checks the failure policies for slots: the local
// fallback holds each instance's share, FailOpen admits without a slot,
// FailClosed rejects.
func TestFlightStoreDown(t *testing.T) {
	down := newTestRedisStore(t, downScripter{}, false)
	l := flightLimit(t, "conc", "", 4)
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	local, _ := NewMemoryStore(MemoryConfig{})
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: down, Fallback: local, Instances: 2})
	if err != nil {
		t.Fatal(err)
	}
	var held []*Slots
	for i := 0; i < 3; i++ {
		v := g.Decide(context.Background(), asks)
		if want := i < 2; (v.Slots != nil) != want || !v.Fallback || v.Err == nil {
			t.Fatalf("fallback, request %d: %+v, want a slot %v (max_in_flight 4 over 2 instances)", i, v, want)
		}
		held = append(held, v.Slots)
	}
	for _, s := range held {
		s.Release()
	}
	if n := local.InFlight(); n != 0 {
		t.Errorf("%d local slots held", n)
	}
	for _, c := range []struct {
		policy StoreErrorPolicy
		want   Outcome
	}{{FailOpen, OutcomeStoreErrorAllow}, {FailClosed, OutcomeStoreErrorDeny}} {
		g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: down, OnStoreError: c.policy})
		if err != nil {
			t.Fatal(err)
		}
		if v := g.Decide(context.Background(), asks); v.Outcome != c.want || v.Slots != nil {
			t.Errorf("policy %v: %+v, want %v without slots", c.policy, v, c.want)
		}
	}
}

// TestFlightRefundLocalCharge cancels the delay of a request whose rates
// and slots the fallback decided while Redis was down: the refund must
// reach the fallback, where the charge is, so the queue has room again.
// (Under Yaegi v0.16.1 an assignment that mixed a call with the verdict's
// other fields lost chargedLocal, and the refund went to Redis.)
func TestFlightRefundLocalCharge(t *testing.T) {
	down := newTestRedisStore(t, downScripter{}, false)
	r, _ := model.ParseRate("1/h")
	l := &model.Limit{Name: "lblocal", Algorithm: model.LeakyBucket, Rate: r, Burst: 2, MaxInFlight: 5}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	local, _ := NewMemoryStore(MemoryConfig{})
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: down, Fallback: local, Instances: 1})
	if err != nil {
		t.Fatal(err)
	}
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	v := g.Decide(context.Background(), asks)
	if v.Outcome != OutcomeAllowed || !v.Fallback || v.Err == nil || !v.chargedLocal {
		t.Fatalf("first request: %+v, want admitted by the fallback, charged locally, with Redis's error", v)
	}
	v.Slots.Release()
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	v, ok := g.Serve(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx), asks)
	if ok || v.Outcome != OutcomeCancelled || !v.chargedLocal {
		t.Fatalf("cancelled delay: proceed %v, %+v", ok, v)
	}
	v = g.Decide(context.Background(), asks)
	if v.Outcome != OutcomeAllowed || v.Delay <= 0 {
		t.Errorf("after the refund: %+v, want admitted with a delay (the cancelled request's place given back locally)", v)
	}
	v.Slots.Release()
}

// TestFlightDryRun checks that a dry run lets a request over the limit
// through, reported and holding no slot.
func TestFlightDryRun(t *testing.T) {
	st, _ := NewMemoryStore(MemoryConfig{})
	l := flightLimit(t, "conc", "", 1)
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: st, Mode: DryRun})
	if err != nil {
		t.Fatal(err)
	}
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	first, _ := g.Serve(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), asks)
	v, ok := g.Serve(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), asks)
	if !ok || v.Outcome != OutcomeDryRunRejected || v.Slots != nil || st.InFlight() != 1 {
		t.Errorf("dry run over the limit: proceed %v, %+v, %d held", ok, v, st.InFlight())
	}
	first.Slots.Release()
}

// TestFlightRedisCluster takes the slots of two limits whose keys fall in
// different hash slots of a Redis Cluster: a request refused by the second
// gives back the lease the first granted it.
func TestFlightRedisCluster(t *testing.T) {
	cc := resptest.Cluster(t, redistest.StartCluster(t, 3).Addrs, 8)
	st := newTestRedisStore(t, cc, true)
	wide := flightLimit(t, "wide"+coretest.Nonce, "", 2)
	// The first narrow limit whose key falls in another hash slot than
	// wide's (names hash apart but for one in 16384).
	var narrow *model.Limit
	for i := 0; narrow == nil; i++ {
		l := flightLimit(t, "narrow"+strconv.Itoa(i)+coretest.Nonce, "", 1)
		if resp.KeySlot(st.StateKey(wide.Flight(), "k")) != resp.KeySlot(st.StateKey(l.Flight(), "k")) {
			narrow = l
		}
	}
	g := flightGate(t, st, 0, wide, narrow)
	both := []model.Ask{{Limit: wide, Key: "k", Cost: 1}, {Limit: narrow, Key: "k", Cost: 1}}
	first := g.Decide(context.Background(), both)
	if first.Slots == nil {
		t.Fatalf("first request: %+v", first)
	}
	if v := g.Decide(context.Background(), both); v.Outcome != OutcomeRejected {
		t.Fatalf("second request, narrow full: %+v", v)
	}
	// wide holds the first request's lease only: one slot is free.
	v := g.Decide(context.Background(), both[:1])
	if v.Slots == nil {
		t.Fatalf("a request of wide alone: %+v; the refused request kept its lease of wide", v)
	}
	v.Slots.Release()
	first.Slots.Release()
	if v := g.Decide(context.Background(), both); v.Slots == nil {
		t.Errorf("after the releases: %+v", v)
	} else {
		v.Slots.Release()
	}
}

// TestFlightAcrossOutage holds requests in flight on a real Redis and on
// the local fallback while the server stops and starts again (losing
// every lease, as a restart without persistence does): however the held
// requests were admitted, the key never has more than max_in_flight of
// them, during the outage or after it.
func TestFlightAcrossOutage(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	st := newTestRedisStore(t, resptest.Client(t, srv.Addr, 8), false)
	const k = 4
	l := flightLimit(t, "outage"+coretest.Nonce, "", k)
	local, _ := NewMemoryStore(MemoryConfig{})
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: st, Fallback: local, Instances: 1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	var held []*Slots
	// take asks for n slots and checks that want of them are granted,
	// by the fallback or not.
	take := func(phase string, n, want int, fallback bool) {
		t.Helper()
		got := 0
		for i := 0; i < n; i++ {
			v := g.Decide(context.Background(), asks)
			if v.Slots == nil {
				continue
			}
			if v.Fallback != fallback {
				t.Errorf("%s: admitted with Fallback %v (%v), want %v", phase, v.Fallback, v.Err, fallback)
			}
			held = append(held, v.Slots)
			got++
		}
		if got != want || len(held) > k {
			t.Fatalf("%s: %d of %d requests admitted, want %d; %d held for max_in_flight %d", phase, got, n, want, len(held), k)
		}
	}
	release := func(n int) {
		for _, s := range held[:n] {
			s.Release()
		}
		held = held[n:]
	}

	// Held by the fallback during an outage, then Redis is back.
	srv.Stop()
	take("outage", k+1, k, true)
	srv.Restart(t)
	take("recovered, four held by the fallback", k, 0, false)
	release(2)
	take("recovered, two released", k, 2, false)
	release(len(held))
	take("recovered, all released", k+1, k, false)

	// Held on Redis, then an outage: the fallback counts them.
	srv.Stop()
	take("outage, four held on Redis", k, 0, true)
	release(1)
	take("outage, one released", k, 1, true)
	// Redis restarts without the leases it had.
	srv.Restart(t)
	take("restarted, four held", k, 0, false)
	release(len(held))
	take("restarted, all released", k+1, k, false)
	release(len(held))
	if n := local.InFlight(); n != 0 {
		t.Errorf("%d local slots held after every release", n)
	}
}

// TestFlightAcrossOutageUnderLoad: workers hold slots of one key for
// 20 ms each, long enough to span the switches, in a loop, while Redis
// stops and restarts three times; at no instant are more than
// max_in_flight of them inside.
func TestFlightAcrossOutageUnderLoad(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	st := newTestRedisStore(t, resptest.Client(t, srv.Addr, 8), false)
	const k, workers, rounds = 3, 8, 1000
	l := flightLimit(t, "outload"+coretest.Nonce, "", k)
	local, _ := NewMemoryStore(MemoryConfig{})
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: st, Fallback: local, Instances: 1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var inside, most, onRedis, onFallback, done int64
	var wg sync.WaitGroup
	for i := 0; i < workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < rounds && atomic.LoadInt64(&done) == 0; j++ {
				v := g.Decide(context.Background(), []model.Ask{{Limit: l, Key: "k", Cost: 1}})
				if v.Slots == nil {
					time.Sleep(time.Millisecond)
					continue
				}
				if v.Fallback {
					atomic.AddInt64(&onFallback, 1)
				} else {
					atomic.AddInt64(&onRedis, 1)
				}
				n := atomic.AddInt64(&inside, 1)
				for {
					m := atomic.LoadInt64(&most)
					if n <= m || atomic.CompareAndSwapInt64(&most, m, n) {
						break
					}
				}
				time.Sleep(20 * time.Millisecond)
				atomic.AddInt64(&inside, -1)
				v.Slots.Release()
			}
		}()
	}
	for i := 0; i < 3; i++ {
		time.Sleep(50 * time.Millisecond)
		srv.Stop()
		time.Sleep(50 * time.Millisecond)
		srv.Restart(t)
	}
	time.Sleep(50 * time.Millisecond)
	atomic.StoreInt64(&done, 1)
	wg.Wait()
	t.Logf("%d admitted on Redis, %d by the fallback, at most %d inside at once (max_in_flight %d)", onRedis, onFallback, most, k)
	if most > k {
		t.Errorf("%d requests inside at once, over max_in_flight %d", most, k)
	}
	if onRedis == 0 || onFallback == 0 {
		t.Errorf("admitted %d on Redis and %d by the fallback: the test wants both", onRedis, onFallback)
	}
	if n := local.InFlight(); n != 0 {
		t.Errorf("%d local slots held after every release", n)
	}
}

// TestFlightRefundGoesWhereCharged cancels the delay of a request whose
// rates Redis charged and whose slots the fallback gave (the gate was
// asserting its slots on Redis after an outage): the refund must reach
// Redis, where the charge is, not the fallback store.
func TestFlightRefundGoesWhereCharged(t *testing.T) {
	st := flightRedisStore(t)
	r, _ := model.ParseRate("1/h")
	l := &model.Limit{Name: "lbcharged" + coretest.Nonce, Algorithm: model.LeakyBucket, Rate: r, Burst: 2, MaxInFlight: 5}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	local, _ := NewMemoryStore(MemoryConfig{})
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: st, Fallback: local, Instances: 1, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	v := g.Decide(context.Background(), asks)
	if v.Outcome != OutcomeAllowed || v.Delay != 0 {
		t.Fatalf("first request: %+v", v)
	}
	v.Slots.Release()
	// Another request asserts the gate's slots: this one's come from the
	// fallback, its rates from Redis.
	atomic.StoreInt32(&g.slots.dirty, slotsAsserting)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	v, ok := g.Serve(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil).WithContext(ctx), asks)
	if ok || v.Outcome != OutcomeCancelled || !v.Fallback || v.chargedLocal {
		t.Fatalf("cancelled delay: proceed %v, %+v", ok, v)
	}
	atomic.StoreInt32(&g.slots.dirty, slotsClean)
	// Refunded on Redis, the queue has room for one more again.
	v = g.Decide(context.Background(), asks)
	if v.Outcome != OutcomeAllowed || v.Delay <= 0 {
		t.Errorf("after the refund: %+v, want admitted with a delay (the cancelled request's slot given back on Redis)", v)
	}
	v.Slots.Release()
}
