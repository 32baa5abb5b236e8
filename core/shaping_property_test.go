package core

import (
	"context"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// shapingLimits are the limits that make requests wait, each with the most
// cost that may proceed in any period: a leaky_bucket lets its requests
// leave one unit every Period/Quota, so at most Quota in a period; a
// token_bucket with MaxDelay lets Burst + Quota through (B + r·T).
func shapingLimits(t *testing.T) []struct {
	l     *model.Limit
	bound float64
} {
	return []struct {
		l     *model.Limit
		bound float64
	}{
		{coretest.Limit(t, "shape-lb", model.LeakyBucket, "10/s", 10, 0), 10},
		{coretest.Limit(t, "shape-lbd", model.LeakyBucket, "4/s", 6, 800*time.Millisecond), 4},
		{coretest.Limit(t, "shape-tbd", model.TokenBucket, "10/s", 1, time.Second), 11},
		{coretest.Limit(t, "shape-tbd5", model.TokenBucket, "10/s", 5, 300*time.Millisecond), 15},
	}
}

// checkShaping drives store, on clock, with random arrivals on l under
// key, some of which give up while they wait and are refunded (Refund with
// their decision, as a Gate does), and fails if the requests that proceed
// (at their admission plus Delay) ever exceed bound in a period.
func checkShaping(t *testing.T, store model.Store, clock *testclock.Clock, l *model.Limit, key string, bound float64, seed int64) {
	t.Helper()
	ctx := context.Background()
	rng := rand.New(rand.NewSource(seed))
	ask := []model.Ask{{Limit: l, Key: key, Cost: 1}}
	type waiter struct {
		departs int64
		d       model.Decision
	}
	var waiting []waiter
	var proceeded []int64
	cancelled := 0
	for step := 0; step < 400; step++ {
		clock.Advance(time.Duration(rng.Int63n(int64(60 * time.Millisecond))))
		now := clock.Now()
		still := waiting[:0]
		for _, w := range waiting {
			if w.departs <= now {
				proceeded = append(proceeded, w.departs)
			} else {
				still = append(still, w)
			}
		}
		waiting = still
		if len(waiting) > 0 && rng.Intn(100) < 15 {
			// A client still waiting hangs up.
			i := rng.Intn(len(waiting))
			if err := store.Refund(ctx, ask, []model.Decision{waiting[i].d}); err != nil {
				t.Fatalf("step %d: Refund: %v", step, err)
			}
			waiting = append(waiting[:i], waiting[i+1:]...)
			cancelled++
			continue
		}
		for n := rng.Intn(4); n >= 0; n-- {
			out := make([]model.Decision, 1)
			if err := store.Take(ctx, ask, out); err != nil {
				t.Fatalf("step %d: Take: %v", step, err)
			}
			switch d := out[0]; {
			case !d.Allowed:
			case d.Delay == 0:
				proceeded = append(proceeded, now)
			default:
				waiting = append(waiting, waiter{now + int64(d.Delay), d})
			}
		}
	}
	for _, w := range waiting {
		proceeded = append(proceeded, w.departs)
	}
	if cancelled < 20 || len(proceeded) < 10 {
		t.Fatalf("%s: a weak trace: %d cancelled, %d proceeded", l.Name, cancelled, len(proceeded))
	}
	sort.Slice(proceeded, func(i, j int) bool { return proceeded[i] < proceeded[j] })
	period := int64(l.Rate.Period)
	j := 0
	for i := range proceeded {
		for j < len(proceeded) && proceeded[j] < proceeded[i]+period {
			j++
		}
		if n := float64(j - i); n > bound {
			t.Fatalf("%s (seed %d): %v requests proceed in the period from +%v, want at most %v (%d cancelled)",
				l.Name, seed, n, time.Duration(proceeded[i]-testclock.Epoch), bound, cancelled)
		}
	}
}

// TestShapingBoundWithCancels: however clients give up while they wait,
// what proceeds never exceeds the rate (issue 20, item 2), in memory.
func TestShapingBoundWithCancels(t *testing.T) {
	for _, c := range shapingLimits(t) {
		for seed := int64(1); seed <= 20; seed++ {
			clock := testclock.New(testclock.Epoch)
			ms, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			checkShaping(t, ms, clock, c.l, "k", c.bound, seed)
		}
	}
}

// TestRedisShapingBoundWithCancels is TestShapingBoundWithCancels on a
// real Redis, whose scripts decide and refund.
func TestRedisShapingBoundWithCancels(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 1)
	for _, c := range shapingLimits(t) {
		for seed := int64(1); seed <= 5; seed++ {
			clock := testclock.New(testclock.Epoch)
			s := newClockedRedisStore(t, client, clock)
			checkShaping(t, s, clock, c.l, coretest.Nonce+"/shape/"+string(rune('a'+seed)), c.bound, seed)
		}
	}
}

// signalStore is a MemoryStore that reports each decision and refund, so
// that a test knows when a request waits and when its refund is done.
type signalStore struct {
	s        *MemoryStore
	took     chan model.Decision
	refunded chan struct{}
}

func (s *signalStore) Take(ctx context.Context, asks []model.Ask, out []model.Decision) error {
	err := s.s.Take(ctx, asks, out)
	s.took <- out[0]
	return err
}

func (s *signalStore) Refund(ctx context.Context, asks []model.Ask, charged []model.Decision) error {
	err := s.s.Refund(ctx, asks, charged)
	s.refunded <- struct{}{}
	return err
}

func (s *signalStore) Settle(ctx context.Context, asks []model.Ask, charged []model.Decision, actual []float64) error {
	return s.s.Settle(ctx, asks, charged, actual)
}

// TestGateShapingWithClientsThatHangUp: over HTTP, clients that hang up
// while a leaky_bucket holds them do not let more than the rate through
// (issue 20, item 2). The gate's clock stands still within each burst of
// requests, so every request's departure is that instant plus its delay;
// the waits themselves are real. At 10/500ms with a queue of 10: ten
// requests wait 0 to 450 ms, four of them (150 to 300 ms) hang up, four
// more arrive, then ten more at 500 ms. The holes the four left must stay
// taken: refunding them let the four newcomers leave at 300 to 450 ms
// beside the requests still queued there, 13 in the period from 300 ms.
func TestGateShapingWithClientsThatHangUp(t *testing.T) {
	clock := testclock.New(testclock.Epoch)
	ms, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	store := &signalStore{s: ms, took: make(chan model.Decision), refunded: make(chan struct{}, 16)}
	l := gateLimit(t, "shape", model.LeakyBucket, "10/500ms", 10)
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: store, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var departures []int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := clock.Now()
		if v, ok := g.Serve(w, r, []model.Ask{{Limit: l, Key: "k", Cost: 1}}); ok {
			mu.Lock()
			departures = append(departures, at+int64(v.Delay))
			mu.Unlock()
		}
	}))
	defer srv.Close()
	client := srv.Client()
	var wg sync.WaitGroup
	// send starts a request and returns its decision and the function
	// that hangs it up.
	send := func() (model.Decision, context.CancelFunc) {
		ctx, cancel := context.WithCancel(context.Background())
		req, err := http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if resp, err := client.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		select {
		case d := <-store.took:
			return d, cancel
		case <-time.After(10 * time.Second):
			t.Fatal("no decision within 10 s")
		}
		return model.Decision{}, cancel
	}
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	for i := 0; i < 10; i++ {
		d, cancel := send()
		cancels = append(cancels, cancel)
		if want := time.Duration(i) * 50 * time.Millisecond; !d.Allowed || d.Delay != want {
			t.Fatalf("request %d: %+v, want admitted with delay %v", i+1, d, want)
		}
	}
	for i := 3; i <= 6; i++ {
		cancels[i]()
	}
	for i := 0; i < 4; i++ {
		select {
		case <-store.refunded:
		case <-time.After(10 * time.Second):
			t.Fatal("the clients that hung up were not refunded within 10 s")
		}
	}
	for i := 0; i < 4; i++ {
		_, cancel := send()
		cancels = append(cancels, cancel)
	}
	clock.Set(testclock.Epoch + int64(500*time.Millisecond))
	for i := 0; i < 10; i++ {
		_, cancel := send()
		cancels = append(cancels, cancel)
	}
	wg.Wait()
	sort.Slice(departures, func(i, j int) bool { return departures[i] < departures[j] })
	j := 0
	for i := range departures {
		for j < len(departures) && departures[j] < departures[i]+int64(l.Rate.Period) {
			j++
		}
		if j-i > 10 {
			t.Fatalf("%d requests proceed in the period from +%v, want at most 10", j-i, time.Duration(departures[i]-testclock.Epoch))
		}
	}
}
