package redisstore

import (
	"context"
	"math"
	"math/rand"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/resp"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// evalCounter counts the script calls made through it.
type evalCounter struct {
	model.Scripter
	calls int64
}

func (c *evalCounter) EvalSha(ctx context.Context, sha string, keys, args []string) (interface{}, error) {
	atomic.AddInt64(&c.calls, 1)
	return c.Scripter.EvalSha(ctx, sha, keys, args)
}

// leasedLimit is a token bucket of rate and burst with a lease of lease.
func leasedLimit(t testing.TB, rate string, burst, lease float64) *model.Limit {
	l := coretest.Limit(t, "lease", model.TokenBucket, rate, burst, 0)
	l.Lease = lease
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLeaseAdmitsLocally: a key asked in a steady stream is admitted from
// leases of at most the limit's Lease, with a script call per lease rather
// than per request, and every request of the burst is admitted, no more.
func TestLeaseAdmitsLocally(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	counter := &evalCounter{Scripter: resptest.Client(t, srv.Addr, 2)}
	s := newTestRedisStore(t, counter, false)
	l := leasedLimit(t, "1/24h", 1000, 50)
	asks := []model.Ask{{Limit: l, Key: coretest.Nonce + "/steady", Cost: 1}}
	out := make([]model.Decision, 1)
	admitted := 0
	var calls int64
	for i := 0; i < 1100; i++ {
		if i == 1000 {
			calls = atomic.LoadInt64(&counter.calls)
		}
		if err := s.Take(context.Background(), asks, out); err != nil {
			t.Fatal(err)
		}
		s.leases.mu.Lock()
		if held := s.leases.m[leaseKey{l, asks[0].Key}]; held != nil && held.units > l.Lease {
			t.Fatalf("request %d: the instance holds %v units, above the Lease of %v", i, held.units, l.Lease)
		}
		s.leases.mu.Unlock()
		if out[0].Allowed {
			admitted++
			if out[0].Limit != l {
				t.Fatalf("decision %d names limit %p, want the leased limit %p", i, out[0].Limit, l)
			}
		}
	}
	if admitted != 1000 {
		t.Errorf("%d of 1100 admitted from a burst of 1000", admitted)
	}
	if calls > 1000/10 {
		t.Errorf("%d script calls for the first 1000 requests, want at most one per 10", calls)
	}
}

// TestLeaseReturns: what a lease holds when it ends goes back to Redis.
func TestLeaseReturns(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	a := newTestRedisStore(t, resptest.Client(t, srv.Addr, 2), false)
	b := newTestRedisStore(t, resptest.Client(t, srv.Addr, 2), false)
	l := leasedLimit(t, "1/24h", 20, 10)
	asks := []model.Ask{{Limit: l, Key: coretest.Nonce + "/returns", Cost: 1}}
	out := make([]model.Decision, 1)
	// Three quick requests: the third takes a lease, which a then holds.
	for i := 0; i < 3; i++ {
		if err := a.Take(context.Background(), asks, out); err != nil || !out[0].Allowed {
			t.Fatalf("request %d on a: %+v, %v", i, out[0], err)
		}
	}
	a.leases.mu.Lock()
	held := a.leases.m[leaseKey{l, asks[0].Key}]
	units := 0.0
	if held != nil {
		units = held.units
	}
	a.leases.mu.Unlock()
	if units < 1 {
		t.Fatalf("a holds %v units after three quick requests, want a lease", units)
	}
	// Until the lease ends, b finds Redis short of what a holds; then it
	// finds it all.
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.leases.mu.Lock()
		n := len(a.leases.m)
		a.leases.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease did not end")
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := 0
	for i := 0; i < 20; i++ {
		if err := b.take(context.Background(), asks, out); err != nil {
			t.Fatal(err)
		}
		if out[0].Allowed {
			got++
		}
	}
	if want := 20 - 3; got != want {
		t.Errorf("b was admitted %d times after a's lease ended, want %d (a spent 3 of 20)", got, want)
	}
}

// leaseFleet is a fleet of instances deciding one leased key on one Redis,
// each with its own store and connection, on one settable clock that the
// Redis scripts decide by.
type leaseFleet struct {
	t     *testing.T
	addr  string
	clock *testclock.Clock
	asks  []model.Ask
}

func newLeaseFleet(t *testing.T, l *model.Limit, key string) *leaseFleet {
	srv := redistest.Start(t, redistest.Options{})
	return &leaseFleet{t: t, addr: srv.Addr, clock: testclock.New(testclock.Epoch), asks: []model.Ask{{Limit: l, Key: coretest.Nonce + "/" + key, Cost: 1}}}
}

// leaseInstance is one instance of a leaseFleet.
type leaseInstance struct {
	store  *Store
	client *resp.Client
}

// join starts an instance. Clients are made one at a time, by the test's
// goroutine: Yaegi v0.16.1 mixes up clients made concurrently.
func (f *leaseFleet) join() *leaseInstance {
	c := resptest.Client(f.t, f.addr, 1)
	s := newTestRedisStore(f.t, c, false)
	s.clock = f.clock.Now
	return &leaseInstance{store: s, client: c}
}

// send sends on counts how many of n requests on in were admitted.
func (f *leaseFleet) send(counts chan<- int, in *leaseInstance, n int) {
	counts <- f.take(in, n)
}

// take makes n requests on in and returns how many were admitted.
func (f *leaseFleet) take(in *leaseInstance, n int) int {
	out := make([]model.Decision, 1)
	admitted := 0
	for i := 0; i < n; i++ {
		if err := in.store.Take(context.Background(), f.asks, out); err != nil {
			f.t.Error(err)
			return admitted
		}
		if out[0].Allowed {
			admitted++
		}
	}
	return admitted
}

// TestLeaseBound runs instances that join, leave and die holding leases,
// their requests concurrent, in phases of demand below and far above the
// rate, and checks the bound the leases promise: in any interval T of the
// scripts' clock, at most B + r·T + instances × Lease admissions.
func TestLeaseBound(t *testing.T) {
	const (
		rate, burst, lease = 1000.0, 50.0, 10.0
		slots, steps       = 8, 1200
	)
	f := newLeaseFleet(t, leasedLimit(t, "1000/1s", burst, lease), "bound")
	seed := time.Now().UnixNano()
	rng := rand.New(rand.NewSource(seed))
	var fleet [slots]*leaseInstance
	// at[s] is the clock at step s, admitted[s] the admissions in it.
	at := make([]int64, steps)
	admitted := make([]int, steps)
	joined, died, leased := 0, 0, 0
	for step := 0; step < steps; step++ {
		f.clock.Advance(time.Duration(rng.Intn(2000)) * time.Microsecond)
		at[step] = f.clock.Now()
		// Each phase of 100 steps asks, per instance and step, at most
		// most requests: 1, with a chance of 1 in 16, leaves the key idle, 3
		// asks for 12 times the rate.
		most := 1 + 2*(step/100%2)
		for i := range fleet {
			switch in := fleet[i]; {
			case in == nil && rng.Intn(20) == 0:
				fleet[i] = f.join()
				joined++
			case in != nil && rng.Intn(100) == 0:
				// Leaves: its leases return when they end.
				fleet[i] = nil
			case in != nil && rng.Intn(100) == 0:
				// Dies: its leases never return.
				in.client.Close()
				fleet[i] = nil
				died++
			}
		}
		// Each instance's requests run at once, in a goroutine of its
		// own that sends back its admissions. (Not a WaitGroup whose
		// Done a closure defers: under Yaegi v0.16.1 that counter once
		// went negative.)
		counts := make(chan int, slots)
		running := 0
		for _, in := range fleet {
			if in == nil {
				continue
			}
			k := rng.Intn(most + 1)
			if most == 1 && rng.Intn(8) != 0 {
				k = 0
			}
			running++
			go f.send(counts, in, k)
		}
		for ; running > 0; running-- {
			admitted[step] += <-counts
		}
		for _, in := range fleet {
			if in != nil {
				in.store.leases.mu.Lock()
				if len(in.store.leases.m) > 0 {
					leased++
				}
				in.store.leases.mu.Unlock()
			}
		}
	}
	total := 0
	for _, n := range admitted {
		total += n
	}
	t.Logf("seed %d: %d instances joined, %d died; %d admissions; an instance held a lease in %d instance-steps", seed, joined, died, total, leased)
	if total < int(burst) || leased == 0 {
		t.Fatalf("%d admissions and %d instance-steps with a lease: the test did not load the key", total, leased)
	}
	// worst is the most admissions in an interval beyond B + r·T, which
	// the leases may take up to instances × Lease.
	worst := 0.0
	for i := range at {
		n := 0
		for j := i; j < steps; j++ {
			n += admitted[j]
			span := time.Duration(at[j] - at[i])
			over := float64(n) - burst - rate*span.Seconds()
			if over > slots*lease {
				t.Fatalf("seed %d: %d admissions within %v, %v above B + r·T, beyond %d × Lease", seed, n, span, over, slots)
			}
			if over > worst {
				worst = over
			}
		}
	}
	t.Logf("at most %.1f admissions beyond B + r·T in an interval, of the %v that %d × Lease allow", worst, slots*lease, slots)
}

// TestLeaseFairness: instances of equal demand on a scarce key, each
// asking twice at every instant in an order that turns, are each admitted
// within 10 % of their fair share.
func TestLeaseFairness(t *testing.T) {
	const instances, steps = 8, 600
	f := newLeaseFleet(t, leasedLimit(t, "2000/1s", 40, 20), "fair")
	fleet := make([]*leaseInstance, instances)
	for i := range fleet {
		fleet[i] = f.join()
	}
	admitted := make([]int, instances)
	for step := 0; step < steps; step++ {
		// 2 units per millisecond for 16 requests.
		f.clock.Advance(time.Millisecond)
		for j := 0; j < instances; j++ {
			i := (step + j) % instances
			admitted[i] += f.take(fleet[i], 2)
		}
	}
	total := 0
	for _, n := range admitted {
		total += n
	}
	share := float64(total) / instances
	t.Logf("admissions per instance: %v", admitted)
	for i, n := range admitted {
		if r := float64(n) / share; r < 0.9 || r > 1.1 {
			t.Errorf("instance %d admitted %d times, %.2f of the fair share %.0f (all: %v)", i, n, r, share, admitted)
		}
	}
}

// BenchmarkLease decides one global key from 8 instances, each with its own
// store and connection and 4 requests at a time, against one Redis, with
// one script call per decision and with leases of at most 100 and 1,000
// units; the rate is never reached. It reports decisions per second and
// script calls per decision.
func BenchmarkLease(b *testing.B) {
	const instances, callers = 8, 4
	srv := redistest.Start(b, redistest.Options{})
	for _, lease := range []float64{0, 100, 1000} {
		name := "per-decision"
		if lease > 0 {
			name = "lease=" + model.FormatFloat(lease)
		}
		b.Run(name, func(b *testing.B) {
			l := leasedLimit(b, "10000000/1s", 1e6, lease)
			asks := []model.Ask{{Limit: l, Key: coretest.Nonce + "/global/" + name, Cost: 1}}
			stores := make([]*Store, instances)
			for i := range stores {
				stores[i] = newTestRedisStore(b, resptest.Client(b, srv.Addr, 1), false)
			}
			calls := srv.ScriptCalls(b)
			left := int64(b.N)
			var wg sync.WaitGroup
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < instances*callers; i++ {
				wg.Add(1)
				go func(s *Store) {
					defer wg.Done()
					out := make([]model.Decision, 1)
					for atomic.AddInt64(&left, -1) >= 0 {
						if err := s.Take(context.Background(), asks, out); err != nil || !out[0].Allowed {
							b.Errorf("%+v, %v", out[0], err)
							return
						}
					}
				}(stores[i%instances])
			}
			wg.Wait()
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
			b.ReportMetric(float64(srv.ScriptCalls(b)-calls)/float64(b.N), "calls/decision")
		})
	}
}

// stateA is the deficit a token bucket's state of l and key holds in
// Redis (its field a), 0 if it has none.
func stateA(t *testing.T, c *resp.Client, s *Store, l *model.Limit, key string) float64 {
	t.Helper()
	v, err := c.Do(context.Background(), "HGET", s.StateKey(l, key), "a")
	if err != nil {
		t.Fatal(err)
	}
	if v == nil {
		return 0
	}
	a, err := strconv.ParseFloat(v.(string), 64)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestLeaseReturnShaped: a lease ends and gives back what is left as its
// limit itself refunds (Limit.Refund), not as the lease was taken (the
// grant form, without MaxDelay). A token bucket without MaxDelay gets the
// units back whatever was admitted since; one with MaxDelay only if
// nothing was, as other requests may since wait for the capacity the
// lease holds: giving it back would let a later request proceed sooner
// than the limit allows, in the slots of requests already waiting.
func TestLeaseReturnShaped(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, tc := range []struct {
		maxDelay time.Duration
		between  bool    // another instance is admitted between the lease and its return
		back     float64 // what the return gives back
	}{
		{0, false, 0.9},
		{0, true, 0.9},
		{time.Second, false, 0.9},
		{time.Second, true, 0},
	} {
		name := "max_delay " + tc.maxDelay.String() + ", admissions since " + strconv.FormatBool(tc.between)
		t.Run(name, func(t *testing.T) {
			clock := testclock.New(testclock.Epoch)
			ca, cb := resptest.Client(t, srv.Addr, 1), resptest.Client(t, srv.Addr, 1)
			a, b := newTestRedisStore(t, ca, false), newTestRedisStore(t, cb, false)
			a.clock, b.clock = clock.Now, clock.Now
			l := coretest.Limit(t, "shaped", model.TokenBucket, "10/s", 10, tc.maxDelay)
			plain := *l // b's: the same limit, without a lease
			l.Lease = 5
			if err := l.Validate(); err != nil {
				t.Fatal(err)
			}
			key := coretest.Nonce + "/" + name
			out := make([]model.Decision, 1)
			// Two requests 10 ms apart: the second takes a lease of 5,
			// leaving a deficit of 5.9 and 4 units held.
			for i := 0; i < 2; i++ {
				if err := a.Take(context.Background(), []model.Ask{{Limit: l, Key: key, Cost: 1}}, out); err != nil || !out[0].Allowed {
					t.Fatalf("request %d: %+v, %v", i, out[0], err)
				}
				if i == 0 {
					clock.Advance(10 * time.Millisecond)
				}
			}
			a.leases.mu.Lock()
			held := a.leases.m[leaseKey{l, key}]
			a.leases.mu.Unlock()
			if held == nil || held.units != 4 {
				t.Fatalf("a holds %+v, want a lease of 5 less the request it admitted", held)
			}
			held.timer.Stop() // the test ends it
			if tc.between {
				// b is admitted until rejected: with MaxDelay, the last
				// ones wait for capacity that a holds.
				for n := 0; ; n++ {
					if err := b.Take(context.Background(), []model.Ask{{Limit: &plain, Key: key, Cost: 1}}, out); err != nil {
						t.Fatal(err)
					}
					if !out[0].Allowed {
						break
					}
					if n > 20 {
						t.Fatal("b is admitted without end")
					}
				}
			}
			before := stateA(t, ca, a, l, key)
			clock.Advance(leaseSpan)
			a.endLease(held)
			if back := before - stateA(t, ca, a, l, key); math.Abs(back-tc.back) > 1e-9 {
				t.Errorf("the lease's return gave back %v, want %v", back, tc.back)
			}
		})
	}
}

// reloaded is l as a host's reload makes it again: an equal limit at
// another address.
func reloaded(t *testing.T, l *model.Limit) *model.Limit {
	t.Helper()
	c := *l
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	return &c
}

// TestLeaseAcrossReload: the limits before and after a reload (at two
// addresses, the new one's Lease equal or lower) that ask for one key, as
// requests on the old and the new configuration do while a reload
// completes, share the one lease the instance holds of its state in Redis,
// holding at most the new Lease; so what the instance admits from leases
// after Redis is spent, alternating the two, is at most that Lease: the
// bound B + r·T + n·k, with n = 1, over an interval that begins when Redis
// is spent.
func TestLeaseAcrossReload(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, lease := range []float64{10, 5} {
		t.Run("lease 10, then "+model.FormatFloat(lease), func(t *testing.T) {
			clock := testclock.New(testclock.Epoch)
			a := newTestRedisStore(t, resptest.Client(t, srv.Addr, 1), false)
			b := newTestRedisStore(t, resptest.Client(t, srv.Addr, 1), false)
			a.clock, b.clock = clock.Now, clock.Now
			old := leasedLimit(t, "1/24h", 100, 10)
			renewed := *old
			renewed.Lease = lease
			if err := renewed.Validate(); err != nil {
				t.Fatal(err)
			}
			limits := []*model.Limit{old, &renewed}
			key := coretest.Nonce + "/reload/" + model.FormatFloat(lease)
			out := make([]model.Decision, 1)
			take := func(s *Store, l *model.Limit) bool {
				t.Helper()
				if err := s.Take(context.Background(), []model.Ask{{Limit: l, Key: key, Cost: 1}}, out); err != nil {
					t.Fatal(err)
				}
				return out[0].Allowed
			}
			// Each limit asks twice, 10 ms apart: the old one takes a
			// lease of 10.
			for _, l := range limits {
				for i := 0; i < 2; i++ {
					if !take(a, l) {
						t.Fatalf("request %d of limit %p refused", i, l)
					}
					clock.Advance(10 * time.Millisecond)
				}
			}
			// Another instance, without a lease, spends what Redis holds.
			plain := *old
			plain.Lease = 0
			if err := plain.Validate(); err != nil {
				t.Fatal(err)
			}
			for n := 0; take(b, &plain); n++ {
				if n > 100 {
					t.Fatal("b is admitted without end")
				}
			}
			admitted := 0
			for i := 0; i < 40; i++ {
				if take(a, limits[i%2]) {
					admitted++
				}
			}
			if admitted > int(lease) {
				t.Errorf("with Redis spent, the instance admitted %d requests from leases, above the Lease of %v", admitted, lease)
			}
		})
	}
}

// TestLeaseGrantsAcrossReloads: the grant forms a store keeps of the
// limits with MaxDelay that lease do not grow with reloads, each of which
// makes the limits again: after 50, it keeps at most those of the limits
// before and after the last one.
func TestLeaseGrantsAcrossReloads(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	clock := testclock.New(testclock.Epoch)
	a := newTestRedisStore(t, resptest.Client(t, srv.Addr, 1), false)
	a.clock = clock.Now
	l := coretest.Limit(t, "shaped-reload", model.TokenBucket, "1000/1s", 1000, time.Second)
	l.Lease = 10
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	out := make([]model.Decision, 1)
	for reload := 0; reload < 50; reload++ {
		l = reloaded(t, l)
		for i := 0; ; i++ {
			if err := a.Take(context.Background(), []model.Ask{{Limit: l, Key: coretest.Nonce + "/grants", Cost: 1}}, out); err != nil || !out[0].Allowed {
				t.Fatalf("reload %d, request %d: %+v, %v", reload, i, out[0], err)
			}
			clock.Advance(10 * time.Millisecond)
			a.leases.mu.Lock()
			asked := a.leases.grants[l] != nil
			a.leases.mu.Unlock()
			if asked {
				break
			}
			if i == 30 {
				t.Fatalf("reload %d: the limit took no lease in 30 requests", reload)
			}
		}
	}
	a.leases.mu.Lock()
	n := len(a.leases.grants)
	a.leases.mu.Unlock()
	if n > 2 {
		t.Errorf("after 50 reloads the store keeps the grant forms of %d limits, want at most 2", n)
	}
}
