// Package storetest is the conformance suite of sluice's stores: the
// seed experiments, run against any model.Store whose time a test drives.
// It imports the standard library, model and testclock only, so that the
// stores' tests run it under Yaegi too.
package storetest

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/testclock"
)

// Tolerances of the conformance suite, so that a store with integer
// milliseconds or scaled arithmetic (Redis) can pass: durations may differ by
// one millisecond, cost amounts by 1e-6. Allowed is compared exactly, and so
// is a RetryAfter of Never.
const (
	confDurTol   = time.Millisecond
	confFloatTol = 1e-6
)

// confAnyReset in a confWant leaves Reset unchecked.
const confAnyReset = time.Duration(-1)

// confNonce makes the keys of one test process unique, so that a shared
// store (a Redis server) that still holds the state of an earlier run, at the
// same fake instants, does not disturb this one.
var confNonce = strconv.FormatInt(time.Now().UnixNano(), 36)

// Conformance runs the seed experiments against a Store whose time
// is driven by clock. newStore is called once per subtest, with a fresh
// clock set to testclock.Epoch; the suite uses only Store.Take,
// Store.Refund and Store.Settle, gives every subtest its own limit names and keys, and
// compares Allowed exactly and amounts within confDurTol and confFloatTol.
func Conformance(t *testing.T, newStore func(t *testing.T, clock *testclock.Clock) model.Store) {
	for _, c := range conformanceCases {
		c := c
		t.Run(c.name, func(t *testing.T) {
			clock := testclock.New(testclock.Epoch)
			r := &confRun{t: t, clock: clock, store: newStore(t, clock), prefix: confNonce + "/" + t.Name() + "/"}
			c.run(r)
		})
	}
}

// confRun is one conformance subtest's store, clock and key space.
type confRun struct {
	t      *testing.T
	clock  *testclock.Clock
	store  model.Store
	prefix string // prepended to every key
	// charged holds the last admission of each limit and key, which
	// refund gives back.
	charged map[string]model.Decision
}

// confWant is an expected Decision. Zero durations and amounts are expected
// to be zero; Reset is checked unless it is confAnyReset.
type confWant struct {
	allowed   bool
	remaining float64
	retry     time.Duration
	delay     time.Duration
	reset     time.Duration
}

// limit returns a validated limit named name (unique within the subtest).
func (r *confRun) limit(name string, alg model.Algorithm, rate string, burst float64, maxDelay time.Duration) *model.Limit {
	r.t.Helper()
	rt, err := model.ParseRate(rate)
	if err != nil {
		r.t.Fatal(err)
	}
	l := &model.Limit{Name: name, Algorithm: alg, Rate: rt, Burst: burst, MaxDelay: maxDelay}
	if err := l.Validate(); err != nil {
		r.t.Fatal(err)
	}
	return l
}

// at sets the clock to testclock.Epoch + d.
func (r *confRun) at(d time.Duration) { r.clock.Set(testclock.Epoch + int64(d)) }

func (r *confRun) ask(l *model.Limit, key string, cost float64) model.Ask {
	return model.Ask{Limit: l, Key: r.prefix + key, Cost: cost}
}

// take asks one limit for cost under key, at the clock's instant.
func (r *confRun) take(l *model.Limit, key string, cost float64) model.Decision {
	r.t.Helper()
	return r.takeAll(r.ask(l, key, cost))[0]
}

func (r *confRun) takeAll(asks ...model.Ask) []model.Decision {
	r.t.Helper()
	out := make([]model.Decision, len(asks))
	if err := r.store.Take(context.Background(), asks, out); err != nil {
		r.t.Fatalf("Take: %v", err)
	}
	if r.charged == nil {
		r.charged = make(map[string]model.Decision)
	}
	for i := range asks {
		if out[i].Allowed {
			r.charged[asks[i].Limit.Namespace()+"\n"+asks[i].Key] = out[i]
		}
	}
	return out
}

// refund gives back asks, each the last admission of its limit and key
// (nothing where there was none).
func (r *confRun) refund(asks ...model.Ask) {
	r.t.Helper()
	charged := make([]model.Decision, len(asks))
	for i := range asks {
		charged[i] = r.charged[asks[i].Limit.Namespace()+"\n"+asks[i].Key]
	}
	if err := r.store.Refund(context.Background(), asks, charged); err != nil {
		r.t.Fatalf("Refund: %v", err)
	}
}

// expect checks got against w.
func (r *confRun) expect(label string, got model.Decision, w confWant) {
	r.t.Helper()
	var bad []string
	if got.Allowed != w.allowed {
		bad = append(bad, fmt.Sprintf("Allowed %v, want %v", got.Allowed, w.allowed))
	}
	if math.Abs(got.Remaining-w.remaining) > confFloatTol {
		bad = append(bad, fmt.Sprintf("Remaining %v, want %v", got.Remaining, w.remaining))
	}
	if !confDurEqual(got.RetryAfter, w.retry) {
		bad = append(bad, fmt.Sprintf("RetryAfter %v, want %v", got.RetryAfter, w.retry))
	}
	if !confDurEqual(got.Delay, w.delay) {
		bad = append(bad, fmt.Sprintf("Delay %v, want %v", got.Delay, w.delay))
	}
	if w.reset != confAnyReset && !confDurEqual(got.Reset, w.reset) {
		bad = append(bad, fmt.Sprintf("Reset %v, want %v", got.Reset, w.reset))
	}
	if got.Remaining < 0 {
		bad = append(bad, fmt.Sprintf("negative Remaining %v", got.Remaining))
	}
	if len(bad) > 0 {
		r.t.Errorf("%s: %v", label, bad)
	}
}

// confDurEqual compares durations within confDurTol; Never only equals Never.
func confDurEqual(got, want time.Duration) bool {
	if got == model.Never || want == model.Never {
		return got == want
	}
	d := got - want
	if d < 0 {
		d = -d
	}
	return d <= confDurTol
}

// drain takes unit costs until one is rejected, at most limit+1 times, and
// returns how many were admitted.
func (r *confRun) drain(l *model.Limit, key string, limit int) int {
	r.t.Helper()
	for n := 0; n <= limit; n++ {
		if !r.take(l, key, 1).Allowed {
			return n
		}
	}
	return limit + 1
}

// retryExact checks that a request rejected with d.RetryAfter at the current
// instant still fails 1 ms before the retry instant and passes at it. It
// leaves the clock at the retry instant, the request admitted.
func (r *confRun) retryExact(label string, l *model.Limit, key string, cost float64, d model.Decision) model.Decision {
	r.t.Helper()
	if d.Allowed || d.RetryAfter <= confDurTol || d.RetryAfter == model.Never {
		r.t.Fatalf("%s: want a rejection with a finite RetryAfter above %v, got %+v", label, confDurTol, d)
	}
	now := r.clock.Now()
	r.clock.Set(now + int64(d.RetryAfter-time.Millisecond))
	if e := r.take(l, key, cost); e.Allowed {
		r.t.Errorf("%s: admitted 1ms before RetryAfter %v", label, d.RetryAfter)
	}
	r.clock.Set(now + int64(d.RetryAfter))
	e := r.take(l, key, cost)
	if !e.Allowed {
		r.t.Errorf("%s: rejected after waiting RetryAfter %v: %+v", label, d.RetryAfter, e)
	}
	return e
}

var conformanceCases = []struct {
	name string
	run  func(r *confRun)
}{
	{"InitialBurst", confInitialBurst},
	{"ExactExhaustion", confExactExhaustion},
	{"TokenBucketRefill", confTokenBucketRefill},
	{"FractionalCost", confFractionalCost},
	{"CostAboveCapacity", confCostAboveCapacity},
	{"BackwardsTime", confBackwardsTime},
	{"FixedWindowFlaw", confFixedWindowFlaw},
	{"SlidingCounterEstimate", confSlidingCounterEstimate},
	{"SlidingLogRetry", confSlidingLogRetry},
	{"MultiLimitAllOrNothing", confMultiLimit},
	{"Refund", confRefund},
	{"RefundKeepsLaterCharges", confRefundKeepsLaterCharges},
	{"LeakyBucketMaxDelay", confLeakyMaxDelay},
	{"LeakyBucketWholeQueue", confLeakyWholeQueue},
	{"TokenBucketMaxDelay", confTokenMaxDelay},
	{"RateChange", confRateChange},
	{"CapacityShrink", confCapacityShrink},
	{"Penalty", confPenalty},
	{"Settle", confSettle},
}

// confLeakyWholeQueue: a leaky_bucket whose Period/Quota is not a whole
// number of nanoseconds still queues its whole capacity at one instant
// (7/s, 13/s: rounding each slot once lost the last one), rejects the next
// request, admits it after its RetryAfter, and a refund frees one slot
// exactly.
func confLeakyWholeQueue(r *confRun) {
	for _, rate := range []string{"7/s", "13/s", "3/7s", "1000/h"} {
		rate := rate
		r.t.Run(rate, func(t *testing.T) {
			r := r.sub(t)
			l := r.limit("whole-lb", model.LeakyBucket, rate, 0, 0)
			n := int(l.Rate.Quota)
			for i := 1; i <= n; i++ {
				if d := r.take(l, "k", 1); !d.Allowed {
					t.Fatalf("request %d of %d at one instant rejected: %+v", i, n, d)
				}
			}
			d := r.take(l, "k", 1)
			if d.Allowed {
				t.Fatalf("request %d at one instant admitted: %+v", n+1, d)
			}
			r.retryExact("the request after a full queue", l, "k", 1, d)
			r.refund(r.ask(l, "k", 1))
			if d := r.take(l, "k", 1); !d.Allowed {
				t.Fatalf("rejected after a refund freed a slot: %+v", d)
			}
		})
	}
}

// confInitialBurst: a full capacity passes at once, the next request fails
// with the exact RetryAfter, and passes after waiting it (not 1 ms sooner).
func confInitialBurst(r *confRun) {
	ms := time.Millisecond
	r.t.Run("token_bucket", func(t *testing.T) {
		r := r.sub(t)
		l := r.limit("burst-tb", model.TokenBucket, "2/s", 5, 0)
		for i := 1; i <= 5; i++ {
			r.expect(fmt.Sprint("take ", i), r.take(l, "k", 1),
				confWant{allowed: true, remaining: float64(5 - i), reset: time.Duration(i) * 500 * ms})
		}
		d := r.take(l, "k", 1)
		r.expect("take 6", d, confWant{retry: 500 * ms, reset: 2500 * ms})
		r.retryExact("take 6", l, "k", 1, d)
	})
	r.t.Run("leaky_bucket", func(t *testing.T) {
		r := r.sub(t)
		l := r.limit("burst-lb", model.LeakyBucket, "5/s", 5, 0)
		for i := 1; i <= 5; i++ {
			r.expect(fmt.Sprint("take ", i), r.take(l, "k", 1), confWant{allowed: true,
				remaining: float64(5 - i), delay: time.Duration(i-1) * 200 * ms, reset: time.Duration(i) * 200 * ms})
		}
		d := r.take(l, "k", 1)
		r.expect("take 6", d, confWant{retry: 200 * ms, reset: time.Second})
		e := r.retryExact("take 6", l, "k", 1, d)
		r.expect("take 6 after waiting", e, confWant{allowed: true, delay: 800 * ms, reset: time.Second})
	})
	// Windows, 15 s into a minute: quota 10.
	windows := []struct {
		alg          model.Algorithm
		reset, retry time.Duration
	}{
		{model.FixedWindow, 45 * time.Second, 45 * time.Second},
		{model.SlidingWindowLog, 60 * time.Second, 60 * time.Second},
		// cur 10 becomes prev: 10·(1−g)+1 ≤ 10 at g = 0.1, 6 s into the next window.
		{model.SlidingWindowCounter, 105 * time.Second, 51 * time.Second},
	}
	for _, w := range windows {
		w := w
		r.t.Run(string(w.alg), func(t *testing.T) {
			r := r.sub(t)
			l := r.limit("burst-"+string(w.alg), w.alg, "10/m", 0, 0)
			r.at(15 * time.Second)
			for i := 1; i <= 10; i++ {
				r.expect(fmt.Sprint("take ", i), r.take(l, "k", 1), confWant{allowed: true, remaining: float64(10 - i), reset: w.reset})
			}
			d := r.take(l, "k", 1)
			r.expect("take 11", d, confWant{retry: w.retry, reset: w.reset})
			r.retryExact("take 11", l, "k", 1, d)
		})
	}
}

// sub returns r for a nested subtest t: same store and clock (set back to
// testclock.Epoch), keys unique to t.
func (r *confRun) sub(t *testing.T) *confRun {
	r.clock.Set(testclock.Epoch)
	return &confRun{t: t, clock: r.clock, store: r.store, prefix: confNonce + "/" + t.Name() + "/"}
}

// confExactExhaustion: a rate whose unit is not a whole number of
// nanoseconds (3/s) still exhausts to exactly 0 and retries exactly.
func confExactExhaustion(r *confRun) {
	l := r.limit("exhaust-tb", model.TokenBucket, "3/s", 0, 0)
	for i := 1; i <= 3; i++ {
		r.expect(fmt.Sprint("take ", i), r.take(l, "k", 1), confWant{allowed: true, remaining: float64(3 - i), reset: confAnyReset})
	}
	d := r.take(l, "k", 1)
	r.expect("take 4", d, confWant{retry: time.Second / 3, reset: time.Second})
	e := r.retryExact("take 4", l, "k", 1, d)
	r.expect("take 4 after waiting", e, confWant{allowed: true, reset: time.Second})
}

// confTokenBucketRefill: partial refill is exact, and idling never fills
// the bucket above its burst.
func confTokenBucketRefill(r *confRun) {
	l := r.limit("refill-tb", model.TokenBucket, "2/s", 5, 0)
	if n := r.drain(l, "a", 10); n != 5 {
		t := r.t
		t.Fatalf("B=5 r=2: %d passed at once, want 5", n)
	}
	r.at(500 * time.Millisecond)
	if n := r.drain(l, "a", 10); n != 1 {
		r.t.Errorf("B=5 r=2, after 0.5 s: %d passed, want 1", n)
	}
	r.at(time.Hour)
	if n := r.drain(l, "a", 10); n != 5 {
		r.t.Errorf("B=5 r=2, after an hour idle: %d passed, want 5 (the burst)", n)
	}

	l8 := r.limit("refill-tb8", model.TokenBucket, "1/s", 8, 0)
	r.at(2 * time.Hour)
	if n := r.drain(l8, "b", 20); n != 8 {
		r.t.Errorf("B=8 r=1: %d passed at once, want 8", n)
	}
	r.at(2*time.Hour + 3*time.Second)
	if n := r.drain(l8, "b", 20); n != 3 {
		r.t.Errorf("B=8 r=1, after 3 s: %d passed, want 3", n)
	}
}

// confFractionalCost: with capacity 5, two requests of 2.5 pass and leave
// exactly 0; the third fails.
func confFractionalCost(r *confRun) {
	ms := time.Millisecond
	cases := []struct {
		alg                       model.Algorithm
		rate                      string
		delay2, retry, reset, at0 time.Duration
	}{
		{model.TokenBucket, "5/s", 0, 500 * ms, time.Second, 0},
		{model.LeakyBucket, "5/s", 500 * ms, 500 * ms, time.Second, 0},
		{model.FixedWindow, "5/m", 0, 45 * time.Second, 45 * time.Second, 15 * time.Second},
		{model.SlidingWindowLog, "5/m", 0, 60 * time.Second, 60 * time.Second, 15 * time.Second},
		// cur 5 becomes prev: 5·(1−g)+2.5 ≤ 5 at g = 0.5, 30 s into the next window.
		{model.SlidingWindowCounter, "5/m", 0, 75 * time.Second, 105 * time.Second, 15 * time.Second},
	}
	for _, c := range cases {
		c := c
		r.t.Run(string(c.alg), func(t *testing.T) {
			r := r.sub(t)
			l := r.limit("frac-"+string(c.alg), c.alg, c.rate, 0, 0)
			r.at(c.at0)
			r.expect("first 2.5", r.take(l, "k", 2.5), confWant{allowed: true, remaining: 2.5, reset: confAnyReset})
			r.expect("second 2.5", r.take(l, "k", 2.5), confWant{allowed: true, delay: c.delay2, reset: c.reset})
			d := r.take(l, "k", 2.5)
			r.expect("third 2.5", d, confWant{retry: c.retry, reset: c.reset})
			r.retryExact("third 2.5", l, "k", 2.5, d)
		})
	}
}

// confCostAboveCapacity: a cost no wait can admit is rejected with Never and
// consumes nothing.
func confCostAboveCapacity(r *confRun) {
	for _, alg := range model.Algorithms {
		alg := alg
		r.t.Run(string(alg), func(t *testing.T) {
			r := r.sub(t)
			l := r.limit("big-"+string(alg), alg, "5/m", 0, 0)
			r.expect("cost 6", r.take(l, "k", 6), confWant{remaining: 5, retry: model.Never})
			r.expect("cost 5.5", r.take(l, "k", 5.5), confWant{remaining: 5, retry: model.Never})
			if n := r.drain(l, "k", 10); n != 5 {
				r.t.Errorf("after rejecting cost 6: %d unit requests passed, want 5", n)
			}
			r.expect("cost 6 when exhausted", r.take(l, "k", 6), confWant{retry: model.Never, reset: confAnyReset})
		})
	}
}

// confBackwardsTime: a clock set back neither panics nor mints capacity.
// Each case charges some cost at t1, leaving k unit requests available
// there; then, at each earlier instant, the store admits at most k (exactly
// k for the algorithms that clamp to the latest instant seen: token bucket,
// fixed window, sliding log), and back at t1 the total admitted is exactly
// k: rejections charge nothing, admissions are not counted twice.
func confBackwardsTime(r *confRun) {
	s := time.Second
	cases := []struct {
		alg    model.Algorithm
		rate   string
		burst  float64
		setup  []time.Duration // instants of unit requests before t1
		t1     time.Duration
		charge int // unit requests at t1
		k      int // unit requests still available at t1
		back   time.Duration
		exact  bool
	}{
		{model.TokenBucket, "2/s", 5, nil, 30 * s, 3, 2, 20 * s, true},
		{model.TokenBucket, "2/s", 5, nil, 30 * s, 3, 2, 100 * time.Millisecond, true},
		{model.FixedWindow, "5/m", 0, nil, 30 * s, 3, 2, 20 * s, true},
		{model.FixedWindow, "5/m", 0, nil, 30 * s, 3, 2, -10 * s, true}, // into the previous window
		{model.SlidingWindowLog, "5/m", 0, nil, 30 * s, 3, 2, -10 * s, true},
		{model.SlidingWindowLog, "5/m", 0, nil, 30 * s, 3, 2, 29 * s, true},
		{model.LeakyBucket, "5/s", 5, nil, 30 * s, 3, 2, 20 * s, false},
		{model.LeakyBucket, "5/s", 5, nil, 30 * s, 3, 2, 29900 * time.Millisecond, false},
		// prev 4; at 50 % of the window 2 more: estimate 4, k = 1.
		{model.SlidingWindowCounter, "5/m", 0, []time.Duration{-30 * s, -30 * s, -30 * s, -30 * s}, 30 * s, 2, 1, 10 * s, false},
		{model.SlidingWindowCounter, "5/m", 0, []time.Duration{-30 * s, -30 * s, -30 * s, -30 * s}, 30 * s, 2, 1, -10 * s, false},
		{model.SlidingWindowCounter, "5/m", 0, nil, 30 * s, 3, 2, 10 * s, true},
	}
	for i, c := range cases {
		c := c
		r.t.Run(fmt.Sprintf("%d_%s", i, c.alg), func(t *testing.T) {
			r := r.sub(t)
			l := r.limit(fmt.Sprintf("back%d-%s", i, c.alg), c.alg, c.rate, c.burst, 0)
			for _, at := range c.setup {
				r.at(at)
				if !r.take(l, "k", 1).Allowed {
					t.Fatalf("setup request at %v rejected", at)
				}
			}
			r.at(c.t1)
			for j := 0; j < c.charge; j++ {
				if !r.take(l, "k", 1).Allowed {
					t.Fatalf("request %d at t1 rejected", j+1)
				}
			}
			r.at(c.back)
			nb := r.drain(l, "k", c.k)
			if nb > c.k || (c.exact && nb != c.k) {
				t.Errorf("clock set back from %v to %v: %d admitted, want %s %d", c.t1, c.back, nb, map[bool]string{true: "exactly", false: "at most"}[c.exact], c.k)
			}
			r.at(c.t1)
			if nt := r.drain(l, "k", c.k); nb+nt != c.k {
				t.Errorf("back at t1: %d more admitted after %d at %v, want %d in all", nt, nb, c.back, c.k)
			}
		})
	}
	r.t.Run("fresh_key", func(t *testing.T) {
		r := r.sub(t)
		for _, alg := range model.Algorithms {
			l := r.limit("backfresh-"+string(alg), alg, "5/m", 0, 0)
			r.at(time.Minute)
			r.take(l, "other", 1)
			r.at(-time.Hour)
			if d := r.take(l, "k", 1); !d.Allowed || d.Remaining < 0 || d.Remaining > 4+confFloatTol {
				t.Errorf("%s: fresh key at an earlier instant: %+v", alg, d)
			}
		}
	})
	r.t.Run("token_bucket_then_refill", func(t *testing.T) {
		r := r.sub(t)
		l := r.limit("backrefill-tb", model.TokenBucket, "2/s", 5, 0)
		r.at(10 * s)
		r.drain(l, "k", 5)
		r.at(-time.Hour)
		d := r.take(l, "k", 1)
		r.expect("an hour back, exhausted", d, confWant{retry: 500 * time.Millisecond, reset: 2500 * time.Millisecond})
		r.at(10*s + 500*time.Millisecond)
		if n := r.drain(l, "k", 5); n != 1 {
			t.Errorf("0.5 s after exhaustion, with a step back between: %d admitted, want 1", n)
		}
	})
}

// confFixedWindowFlaw: 10 requests at 00:59.9 and 10 at 01:00.1 all pass a
// fixed window of 10/min (its known flaw), while the sliding log and the
// sliding counter reject the second batch.
func confFixedWindowFlaw(r *confRun) {
	fw := r.limit("flaw-fw", model.FixedWindow, "10/m", 0, 0)
	log := r.limit("flaw-log", model.SlidingWindowLog, "10/m", 0, 0)
	ctr := r.limit("flaw-ctr", model.SlidingWindowCounter, "10/m", 0, 0)
	limits := []*model.Limit{fw, log, ctr}
	r.at(59900 * time.Millisecond)
	for _, l := range limits {
		for i := 0; i < 10; i++ {
			if d := r.take(l, "k", 1); !d.Allowed {
				r.t.Errorf("%s: request %d at 00:59.9 rejected", l.Algorithm, i+1)
			}
		}
	}
	r.at(60100 * time.Millisecond)
	for i := 0; i < 10; i++ {
		if d := r.take(fw, "k", 1); !d.Allowed {
			r.t.Errorf("fixed_window: request %d at 01:00.1 rejected; the flaw admits it", i+1)
		}
	}
	for i := 0; i < 10; i++ {
		// The log's oldest entry leaves at 01:59.9.
		r.expect(fmt.Sprint("sliding_window_log at 01:00.1, request ", i+1), r.take(log, "k", 1),
			confWant{retry: 59800 * time.Millisecond, reset: 59800 * time.Millisecond})
		// prev 10 weighs 10·(1 − 0.1/60); 1 more fits once 10·(1−f) ≤ 9, at f = 0.1: 6 s in.
		r.expect(fmt.Sprint("sliding_window_counter at 01:00.1, request ", i+1), r.take(ctr, "k", 1),
			confWant{remaining: 10 - 10*(1-0.1/60), retry: 5900 * time.Millisecond, reset: 59900 * time.Millisecond})
	}
}

// confSlidingCounterEstimate: seed 001's example. Quota 100/min, 80 in the
// previous window, 20 in the current, 30 % into it: the estimate is
// 80·0.7 + 20 = 76.
func confSlidingCounterEstimate(r *confRun) {
	l := r.limit("estimate-ctr", model.SlidingWindowCounter, "100/m", 0, 0)
	r.at(10 * time.Second)
	if !r.take(l, "k", 80).Allowed {
		r.t.Fatal("80 in an empty window rejected")
	}
	r.at(60 * time.Second)
	r.expect("20 at the window start", r.take(l, "k", 20), confWant{allowed: true, remaining: 0, reset: 120 * time.Second})
	r.at(78 * time.Second)
	// 76 + 25 > 100; it fits once 80·(1−f) ≤ 55, at f = 0.3125: 18.75 s in.
	d := r.take(l, "k", 25)
	r.expect("25 at 30 %", d, confWant{remaining: 100 - 76, retry: 750 * time.Millisecond, reset: 102 * time.Second})
	e := r.retryExact("25 at 30 %", l, "k", 25, d)
	r.expect("25 after waiting", e, confWant{allowed: true, remaining: 0, reset: 101250 * time.Millisecond})
	r.expect("1 more", r.take(l, "k", 1), confWant{
		// 80·(1−f) + 46 ≤ 100 at f = 0.325: 19.5 s in, 0.75 s from now.
		retry: 750 * time.Millisecond, reset: confAnyReset})
}

// confSlidingLogRetry: the log's RetryAfter is when enough of the oldest
// entries have left.
func confSlidingLogRetry(r *confRun) {
	l := r.limit("retry-log", model.SlidingWindowLog, "3/m", 0, 0)
	for _, at := range []time.Duration{0, 10 * time.Second, 20 * time.Second} {
		r.at(at)
		if !r.take(l, "k", 1).Allowed {
			r.t.Fatalf("request at %v rejected", at)
		}
	}
	r.at(30 * time.Second)
	r.expect("cost 2 at 0:30", r.take(l, "k", 2), confWant{retry: 40 * time.Second, reset: 50 * time.Second})
	d := r.take(l, "k", 1)
	r.expect("cost 1 at 0:30", d, confWant{retry: 30 * time.Second, reset: 50 * time.Second})
	e := r.retryExact("cost 1 at 0:30", l, "k", 1, d)
	r.expect("cost 1 at 1:00", e, confWant{allowed: true, reset: 60 * time.Second})
	r.expect("cost 1 more at 1:00", r.take(l, "k", 1), confWant{retry: 10 * time.Second, reset: 60 * time.Second})
}

// confMultiLimit: a request under several limits is all-or-nothing.
func confMultiLimit(r *confRun) {
	plenty := []*model.Limit{
		r.limit("multi-tb", model.TokenBucket, "100/s", 0, 0),
		r.limit("multi-lb", model.LeakyBucket, "100/s", 0, 0),
		r.limit("multi-fw", model.FixedWindow, "100/m", 0, 0),
		r.limit("multi-log", model.SlidingWindowLog, "100/m", 0, 0),
		r.limit("multi-ctr", model.SlidingWindowCounter, "100/m", 0, 0),
	}
	tight := r.limit("multi-tight", model.TokenBucket, "1/h", 1, 0)
	r.at(time.Second)
	if !r.take(tight, "k", 1).Allowed {
		r.t.Fatal("first request to the tight limit rejected")
	}
	for _, first := range []bool{true, false} {
		var asks []model.Ask
		if first {
			asks = append(asks, r.ask(tight, "k", 1))
		}
		for _, l := range plenty {
			asks = append(asks, r.ask(l, "k", 1))
		}
		if !first {
			asks = append(asks, r.ask(tight, "k", 1))
		}
		out := r.takeAll(asks...)
		for i, d := range out {
			if asks[i].Limit == tight {
				r.expect("the exhausted limit", d, confWant{retry: time.Hour, reset: time.Hour})
			} else {
				r.expect(asks[i].Limit.Name+" beside the exhausted limit", d, confWant{allowed: true, remaining: 99, reset: confAnyReset})
			}
		}
	}
	for _, l := range plenty {
		r.expect(l.Name+" alone, after two rejected multi-limit requests", r.take(l, "k", 1),
			confWant{allowed: true, remaining: 99, reset: confAnyReset})
	}
	// When every limit allows, every limit is charged.
	var asks []model.Ask
	for _, l := range plenty {
		asks = append(asks, r.ask(l, "k", 1))
	}
	for i, d := range r.takeAll(asks...) {
		if !d.Allowed {
			r.t.Errorf("%s: rejected in an all-allowed multi-limit request", asks[i].Limit.Name)
		}
	}
	for _, l := range plenty {
		d := r.take(l, "k", 1)
		if !d.Allowed || math.Abs(d.Remaining-97) > confFloatTol {
			r.t.Errorf("%s after one single and one multi-limit request: %+v, want allowed with 97 remaining", l.Name, d)
		}
	}
}

// confRefund: a refund gives back what was charged and no more.
func confRefund(r *confRun) {
	ms := time.Millisecond
	r.t.Run("leaky_bucket_cancelled_wait", func(t *testing.T) {
		r := r.sub(t)
		l := r.limit("refund-lb", model.LeakyBucket, "5/s", 5, 0)
		for i := 0; i < 3; i++ {
			r.take(l, "k", 1)
		}
		r.refund(r.ask(l, "k", 1)) // the request with delay 400 ms leaves
		for i, delay := range []time.Duration{400 * ms, 600 * ms, 800 * ms} {
			r.expect(fmt.Sprint("after the refund, take ", i+1), r.take(l, "k", 1),
				confWant{allowed: true, remaining: float64(2 - i), delay: delay, reset: delay + 200*ms})
		}
		r.expect("queue full", r.take(l, "k", 1), confWant{retry: 200 * ms, reset: time.Second})
		r.at(300 * ms)
		r.refund(r.ask(l, "k", 1)) // the last one, waiting until 0.8 s, leaves
		r.expect("at 0.3 s, after a second refund", r.take(l, "k", 1),
			confWant{allowed: true, remaining: 1.5, delay: 500 * ms, reset: 700 * ms})
	})
	for _, alg := range model.Algorithms {
		alg := alg
		r.t.Run(string(alg), func(t *testing.T) {
			r := r.sub(t)
			l := r.limit("refund-"+string(alg), alg, "5/h", 0, 0)
			r.at(time.Second)
			if n := r.drain(l, "k", 5); n != 5 {
				t.Fatalf("%d admitted, want 5", n)
			}
			r.refund(r.ask(l, "k", 2))
			if n := r.drain(l, "k", 5); n != 2 {
				t.Errorf("after refunding 2: %d admitted, want 2", n)
			}
			r.refund(r.ask(l, "absent", 3)) // nothing was charged: no effect
			r.refund(r.ask(l, "k2", 1))
			r.take(l, "k2", 1)
			r.refund(r.ask(l, "k2", 10)) // gives back 1, not 10
			if n := r.drain(l, "k2", 10); n != 5 {
				t.Errorf("after refunding 10 of 1 charged: %d admitted, want 5", n)
			}
			if n := r.drain(l, "absent", 10); n != 5 {
				t.Errorf("a key refunded before any request: %d admitted, want 5", n)
			}
		})
	}
}

// refundOf gives back the admission d of ask.
func (r *confRun) refundOf(ask model.Ask, d model.Decision) {
	r.t.Helper()
	if err := r.store.Refund(context.Background(), []model.Ask{ask}, []model.Decision{d}); err != nil {
		r.t.Fatalf("Refund: %v", err)
	}
}

// confRefundKeepsLaterCharges: refunding an admission that others followed
// leaves their charges, and their departures, where they are: the
// capacity is never more than had it not been admitted, and no new
// request is scheduled on top of one still waiting.
func confRefundKeepsLaterCharges(r *confRun) {
	ms := time.Millisecond
	r.t.Run("token_bucket_refilled", func(t *testing.T) {
		r := r.sub(t)
		l := r.limit("later-tb", model.TokenBucket, "10/s", 10, 0)
		a := r.take(l, "k", 1)
		r.at(100 * ms) // A's token is back by now
		r.take(l, "k", 1)
		r.refundOf(r.ask(l, "k", 1), a) // B's charge stays: 9 tokens
		r.expect("after A's refund", r.take(l, "k", 1), confWant{allowed: true, remaining: 8, reset: 200 * ms})
	})
	r.t.Run("fixed_window_previous", func(t *testing.T) {
		r := r.sub(t)
		l := r.limit("later-fw", model.FixedWindow, "10/s", 0, 0)
		r.at(900 * ms)
		a := r.take(l, "k", 1)
		r.at(1100 * ms) // the next window
		r.take(l, "k", 1)
		r.refundOf(r.ask(l, "k", 1), a)
		r.expect("after A's refund", r.take(l, "k", 1), confWant{allowed: true, remaining: 8, reset: 900 * ms})
	})
	r.t.Run("sliding_window_counter_previous", func(t *testing.T) {
		r := r.sub(t)
		l := r.limit("later-swc", model.SlidingWindowCounter, "10/s", 0, 0)
		r.at(900 * ms)
		a := r.take(l, "k", 1)
		r.at(1100 * ms)
		r.take(l, "k", 1)
		r.refundOf(r.ask(l, "k", 1), a) // out of the previous window, B stays
		r.expect("after A's refund", r.take(l, "k", 1), confWant{allowed: true, remaining: 8, reset: 1900 * ms})
	})
	r.t.Run("sliding_window_log_older", func(t *testing.T) {
		r := r.sub(t)
		l := r.limit("later-swl", model.SlidingWindowLog, "3/s", 0, 0)
		a := r.take(l, "k", 1)
		r.at(500 * ms)
		r.take(l, "k", 1)
		r.refundOf(r.ask(l, "k", 1), a) // A's entry goes, not B's
		r.at(1200 * ms)                 // B's entry counts until 1.5 s
		if n := r.drain(l, "k", 3); n != 2 {
			t.Errorf("at 1.2 s: %d admitted, want 2", n)
		}
	})
	r.t.Run("leaky_bucket_hole", func(t *testing.T) {
		r := r.sub(t)
		l := r.limit("later-lb", model.LeakyBucket, "10/s", 10, 0)
		var ds []model.Decision
		for i := 0; i < 4; i++ {
			ds = append(ds, r.take(l, "k", 1)) // delays 0, 100, 200, 300 ms
		}
		r.refundOf(r.ask(l, "k", 1), ds[1]) // the wait until 100 ms leaves: a hole
		r.expect("after the refund", r.take(l, "k", 1),
			confWant{allowed: true, remaining: 5, delay: 400 * ms, reset: 500 * ms})
		r.refundOf(r.ask(l, "k", 1), ds[3]) // no longer the last: a hole too
		r.expect("after a second refund", r.take(l, "k", 1),
			confWant{allowed: true, remaining: 4, delay: 500 * ms, reset: 600 * ms})
	})
	r.t.Run("token_bucket_max_delay_hole", func(t *testing.T) {
		r := r.sub(t)
		l := r.limit("later-tbd", model.TokenBucket, "10/s", 1, time.Second)
		var ds []model.Decision
		for i := 0; i < 3; i++ {
			ds = append(ds, r.take(l, "k", 1)) // delays 0, 100, 200 ms
		}
		r.refundOf(r.ask(l, "k", 1), ds[1])
		r.expect("after the refund", r.take(l, "k", 1),
			confWant{allowed: true, delay: 300 * ms, reset: 400 * ms})
	})
}

// confLeakyMaxDelay: a leaky_bucket request is admitted iff its delay is at
// most MaxDelay.
func confLeakyMaxDelay(r *confRun) {
	ms := time.Millisecond
	l := r.limit("maxdelay-lb", model.LeakyBucket, "5/s", 10, 400*ms)
	// Remaining counts the unit requests whose delay would still be ≤ 400 ms.
	for i := 1; i <= 3; i++ {
		r.expect(fmt.Sprint("take ", i), r.take(l, "k", 1), confWant{allowed: true,
			remaining: float64(3 - i), delay: time.Duration(i-1) * 200 * ms, reset: time.Duration(i) * 200 * ms})
	}
	d := r.take(l, "k", 1)
	r.expect("take 4: delay 600 ms > 400 ms", d, confWant{retry: 200 * ms, reset: 600 * ms})
	e := r.retryExact("take 4", l, "k", 1, d)
	r.expect("take 4 after waiting", e, confWant{allowed: true, delay: 400 * ms, reset: 600 * ms})
	r.expect("cost 3: fits the queue, but would wait 600 ms", r.take(l, "k", 3), confWant{retry: 200 * ms, reset: 600 * ms})
}

// confTokenMaxDelay: with MaxDelay a token_bucket admits a request whose
// tokens come within it, with that delay, lending them (the bucket goes
// into debt), as Traefik's rateLimit does; beyond it, RetryAfter is the
// time until they do.
func confTokenMaxDelay(r *confRun) {
	ms := time.Millisecond
	l := r.limit("maxdelay-tb", model.TokenBucket, "2/s", 1, 250*ms)
	r.expect("take 1", r.take(l, "k", 1), confWant{allowed: true, reset: 500 * ms})
	r.at(300 * ms)
	// 0.6 token: 0.4 missing, 200 ms away.
	r.expect("take 2 at 300 ms", r.take(l, "k", 1), confWant{allowed: true, delay: 200 * ms, reset: 700 * ms})
	// 1.4 tokens owed: 700 ms away, 450 ms until within 250 ms.
	d := r.take(l, "k", 1)
	r.expect("take 3 at 300 ms", d, confWant{retry: 450 * ms, reset: 700 * ms})
	e := r.retryExact("take 3", l, "k", 1, d)
	r.expect("take 3 after waiting", e, confWant{allowed: true, delay: 250 * ms, reset: 750 * ms})
}

// confRateChange: a limit whose rate changes under the same name and
// algorithm (10/m, then 10/h) keeps its state as model.Step reads it: 4
// taken at the start of an hour still count in the hour's window, and the
// key is admitted again after the RetryAfter of the new rate.
func confRateChange(r *confRun) {
	ms := 59*time.Minute + 30*time.Second // to the end of the hour
	cases := []struct {
		alg       model.Algorithm
		n         int // admitted at 10/h
		remaining float64
		retry     time.Duration
	}{
		// 30 s at 10/h refill 1/12 token of the 4 taken: 6 fit, the 7th
		// waits for the other 11/12 of a token, 6 min each.
		{model.TokenBucket, 6, 1.0 / 12, 330 * time.Second},
		// The 4 left the queue by 24 s; 10 queue at 6 min each.
		{model.LeakyBucket, 10, 0, 6 * time.Minute},
		{model.FixedWindow, 6, 0, ms},
		// cur 10 becomes prev: 10·(1−g)+1 ≤ 10 at g = 0.1, 6 min into
		// the next hour.
		{model.SlidingWindowCounter, 6, 0, ms + 6*time.Minute},
		{model.SlidingWindowLog, 6, 0, ms},
	}
	for _, c := range cases {
		c := c
		r.t.Run(string(c.alg), func(t *testing.T) {
			r := r.sub(t)
			perMinute := r.limit("rate-"+string(c.alg), c.alg, "10/m", 0, 0)
			perHour := r.limit("rate-"+string(c.alg), c.alg, "10/h", 0, 0)
			r.at(46 * time.Minute) // 23:00:00
			for i := 0; i < 4; i++ {
				if d := r.take(perMinute, "k", 1); !d.Allowed {
					t.Fatalf("10/m, take %d: %+v", i+1, d)
				}
			}
			r.at(46*time.Minute + 30*time.Second)
			if n := r.drain(perHour, "k", 10); n != c.n {
				t.Errorf("10/h after 4 at 10/m: %d admitted, want %d", n, c.n)
			}
			d := r.take(perHour, "k", 1)
			r.expect("10/h, exhausted", d, confWant{remaining: c.remaining, retry: c.retry, reset: confAnyReset})
			r.retryExact("10/h, exhausted", perHour, "k", 1, d)
		})
	}
}

// confCapacityShrink: a token bucket drained at burst 100 and then limited
// to burst 1 is empty, not 100 tokens in debt: one token later, a request
// passes.
func confCapacityShrink(r *confRun) {
	big := r.limit("shrink", model.TokenBucket, "100/h", 100, 0)
	small := r.limit("shrink", model.TokenBucket, "1/h", 1, 0)
	if n := r.drain(big, "k", 100); n != 100 {
		r.t.Fatalf("burst 100: %d admitted, want 100", n)
	}
	d := r.take(small, "k", 1)
	r.expect("burst 1, just shrunk", d, confWant{retry: time.Hour, reset: time.Hour})
	r.retryExact("burst 1, just shrunk", small, "k", 1, d)
}

// admits checks that a request of cost 1 of key is admitted by l, or
// not.
func (r *confRun) admits(label string, l *model.Limit, key string, want bool) {
	r.t.Helper()
	if d := r.take(l, key, 1); d.Allowed != want {
		r.t.Errorf("%s: %+v, want Allowed %v", label, d, want)
	}
}

// confPenalty: a key that a limit with a Penalty refuses is refused for
// the penalty from that refusal, with its remaining time as RetryAfter,
// Next and Reset, charging nothing, whatever the algorithm; refusals
// during it do not extend it; after it the key finds the state that time
// left; another key, and a request that another limit refuses, start
// none.
func confPenalty(r *confRun) {
	for _, alg := range model.Algorithms {
		alg := alg
		r.t.Run(string(alg), func(t *testing.T) {
			r := r.sub(t)
			rt, _ := model.ParseRate("2/s")
			l := &model.Limit{Name: "pen-" + string(alg), Algorithm: alg, Rate: rt, Penalty: 10 * time.Second}
			if err := l.Validate(); err != nil {
				r.t.Fatal(err)
			}
			r.at(time.Second)
			if n := r.drain(l, "k", 5); n != 2 {
				r.t.Fatalf("%d admitted before the refusal, want 2", n)
			}
			held := confWant{retry: 10 * time.Second, reset: 10 * time.Second}
			r.expect("the key held out", r.take(l, "k", 1), held)
			r.at(6 * time.Second)
			d := r.take(l, "k", 1)
			r.expect("5s into the penalty, the state whole", d, confWant{retry: 5 * time.Second, reset: 5 * time.Second})
			if !confDurEqual(d.Next, 5*time.Second) {
				r.t.Errorf("Next %v 5s into the penalty, want 5s", d.Next)
			}
			r.expect("another key", r.take(l, "other", 1), confWant{allowed: true, remaining: 1, reset: confAnyReset})
			r.at(11*time.Second - time.Millisecond)
			// Reset counts the request the state would admit (see
			// model.Penalise).
			r.expect("1ms before the end", r.take(l, "k", 1), confWant{retry: time.Millisecond, reset: confAnyReset})
			r.at(11 * time.Second)
			r.admits("at the end", l, "k", true)
			r.admits("then", l, "k", true)
			r.expect("refused again: a new penalty", r.take(l, "k", 1), held)

			// Beside a limit that refuses, the penalised limit admits
			// and starts no penalty; held out, it charges no other.
			tight := r.limit("pen-tight-"+string(alg), model.TokenBucket, "1/h", 1, 0)
			r.at(30 * time.Second)
			out := r.takeAll(r.ask(tight, "j", 1), r.ask(l, "j", 1))
			if !out[0].Allowed || !out[1].Allowed {
				r.t.Fatalf("first request of j: %+v", out)
			}
			out = r.takeAll(r.ask(tight, "j", 1), r.ask(l, "j", 1))
			if out[0].Allowed || !out[1].Allowed {
				r.t.Errorf("j refused by the tight limit: %+v, want the penalised limit's admission beside the refusal", out)
			}
			r.admits("j alone", l, "j", true)
			r.expect("j refused by its limit", r.take(l, "j", 1), held)
			r.at(35 * time.Second)
			wide := r.limit("pen-wide-"+string(alg), model.TokenBucket, "100/s", 0, 0)
			out = r.takeAll(r.ask(wide, "j", 1), r.ask(l, "j", 1))
			if out[1].Allowed {
				r.t.Errorf("j held out beside a wide limit: %+v", out)
			}
			r.expect("the wide limit, charged nothing", r.take(wide, "j", 1), confWant{allowed: true, remaining: 99, reset: confAnyReset})
		})
	}
}

// settle settles the last admission of ask's limit and key at actual.
func (r *confRun) settle(ask model.Ask, actual float64) {
	r.t.Helper()
	d := r.charged[ask.Limit.Namespace()+"\n"+ask.Key]
	if err := r.store.Settle(context.Background(), []model.Ask{ask}, []model.Decision{d}, []float64{actual}); err != nil {
		r.t.Fatalf("Settle: %v", err)
	}
}

// confSettle: a limit that takes its cost from the response, 10 an hour,
// charged its estimate and settled at the actual cost, whatever the
// algorithm: a settlement above the estimate charges the difference, one
// below gives it back, and one that takes the key beyond its capacity
// leaves it in debt, refusing even a cost of 0, with nothing remaining,
// until its RetryAfter, which the state outlives (Reset). A token_bucket
// with max_delay delays a request once the debt is within what it lends.
func confSettle(r *confRun) {
	for _, alg := range model.Algorithms {
		alg := alg
		r.t.Run(string(alg), func(t *testing.T) {
			r := r.sub(t)
			rt, _ := model.ParseRate("10/h")
			l := &model.Limit{Name: "settle-" + string(alg), Algorithm: alg, Rate: rt, CostHeader: "X-Cost"}
			if err := l.Validate(); err != nil {
				t.Fatal(err)
			}
			r.at(time.Second)
			r.take(l, "more", 4)
			r.settle(r.ask(l, "more", 4), 9)
			if n := r.drain(l, "more", 10); n != 1 {
				t.Errorf("4 settled at 9: %d admitted after, want 1", n)
			}
			r.take(l, "less", 4)
			r.settle(r.ask(l, "less", 4), 1)
			if n := r.drain(l, "less", 10); n != 9 {
				t.Errorf("4 settled at 1: %d admitted after, want 9", n)
			}
			r.expect("estimate 0", r.take(l, "debt", 0), confWant{allowed: true, remaining: 10})
			r.take(l, "debt", 10)
			r.settle(r.ask(l, "debt", 0), 10) // the estimate of 0 was 10: 20 charged
			d := r.take(l, "debt", 0)
			if d.Allowed || d.Remaining != 0 || d.Reset < d.RetryAfter {
				t.Errorf("in debt: %+v, want a refusal with nothing remaining and Reset at least RetryAfter", d)
			}
			r.retryExact("in debt, cost 0", l, "debt", 0, d)
			r.settle(r.ask(l, "none", 1), 5) // nothing charged: nothing settled
			if n := r.drain(l, "none", 20); n != 10 {
				t.Errorf("a settlement of no admission: %d admitted after, want 10", n)
			}
		})
	}
	r.t.Run("token_bucket_max_delay", func(t *testing.T) {
		r := r.sub(t)
		rt, _ := model.ParseRate("10/h")
		l := &model.Limit{Name: "settle-delay", Rate: rt, MaxDelay: 12 * time.Minute, CostBytes: true}
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
		r.take(l, "k", 10)
		r.settle(r.ask(l, "k", 10), 13) // 3 in debt, 2 of which MaxDelay lends
		d := r.take(l, "k", 0)
		r.expect("3 in debt", d, confWant{retry: 6 * time.Minute, reset: 78 * time.Minute})
		r.at(6 * time.Minute)
		r.expect("2 in debt", r.take(l, "k", 0), confWant{allowed: true, delay: 12 * time.Minute, reset: 72 * time.Minute})
	})
}
