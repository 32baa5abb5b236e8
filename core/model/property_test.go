package model

import (
	"math"
	"math/rand"
	"sort"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/testclock"
)

// TestPropertyInvariants drives every algorithm with random traces (fixed
// seeds: failures reproduce) in which time mostly advances, sometimes jumps
// and sometimes steps back, and checks what must hold whatever happens:
//
//   - token_bucket admits at most Capacity + rate·T in any interval of
//     length T (checked for every pair of admission instants);
//   - sliding_window_log admits at most the quota within any Period;
//   - fixed_window admits at most the quota per window, hence at most twice
//     the quota within any Period; sliding_window_counter, an estimate, is
//     held to the same two bounds;
//   - leaky_bucket spaces the departures of admitted requests by their cost
//     at the rate, never queues more than Capacity and never delays beyond
//     MaxDelay;
//   - every decision is well formed (Remaining in [0, Capacity], RetryAfter
//     set iff rejected, Never iff the cost exceeds the capacity), waiting
//     RetryAfter is enough and waiting 99 % of it is not, and a state at its
//     Expiry decides like the zero State.
//
// Instants are the ones the algorithms decide at: a step back is clamped to
// the latest instant the state holds (the leaky bucket does not clamp).
// With -short (and under Yaegi) the traces are fewer and shorter.
func TestPropertyInvariants(t *testing.T) {
	traces, steps := 12, 2000
	if testing.Short() {
		traces, steps = 3, 300
	}
	for ai, alg := range Algorithms {
		for i := 0; i < traces; i++ {
			seed := int64(1000*ai + i + 1)
			rng := rand.New(rand.NewSource(seed))
			l := propLimit(t, rng, alg)
			propTrace(t, seed, rng, l, steps, i%2 == 0)
		}
	}
}

var (
	propQuotas  = []float64{1, 2, 2.5, 3, 5, 7, 10, 100}
	propPeriods = []time.Duration{250 * time.Millisecond, time.Second, 7 * time.Second, time.Minute}
	propBursts  = []float64{0, 0, 1, 3.5, 8, 20}
)

func propLimit(t *testing.T, rng *rand.Rand, alg Algorithm) *Limit {
	l := &Limit{Name: "prop", Algorithm: alg, Rate: Rate{
		Quota:  propQuotas[rng.Intn(len(propQuotas))],
		Period: propPeriods[rng.Intn(len(propPeriods))],
	}}
	if alg == TokenBucket || alg == LeakyBucket {
		l.Burst = propBursts[rng.Intn(len(propBursts))]
	}
	if (alg == LeakyBucket || alg == TokenBucket) && rng.Intn(2) == 0 {
		l.MaxDelay = time.Duration(rng.Int63n(int64(l.Rate.Period))) + 1
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return l
}

// propAdmission is one admitted request: the instant its limit decided at,
// the window it was counted in (windows only), its cost.
type propAdmission struct {
	at, window int64
	cost       float64
}

// propTrace runs one trace. With keepRejected, the state returned by a
// rejection replaces the old one (Decide's contract: it charges nothing);
// otherwise only admissions change the state, as in a Store.
func propTrace(t *testing.T, seed int64, rng *rand.Rand, l *Limit, steps int, keepRejected bool) {
	t.Helper()
	fail := func(step int, format string, args ...interface{}) {
		t.Helper()
		t.Fatalf("seed %d, %s %v burst %v max_delay %v, step %d: "+format,
			append([]interface{}{seed, l.Algorithm, l.Rate, l.Burst, l.MaxDelay, step}, args...)...)
	}
	unit := int64(l.Unit())
	now := testclock.Epoch + rng.Int63n(l.PeriodNanos())
	var s State
	var adm []propAdmission
	var lastStart int64 // leaky_bucket: departure of the previous admission
	var lastCost float64
	for step := 0; step < steps; step++ {
		switch r := rng.Intn(100); {
		case r < 5: // a clock step back, up to two periods
			now -= rng.Int63n(2*l.PeriodNanos()) + 1
		case r < 10: // a jump forward, up to three periods
			now += rng.Int63n(3 * l.PeriodNanos())
		default:
			now += rng.Int63n(2*unit + 1)
		}
		cost := 1.0
		switch r := rng.Intn(10); {
		case r < 2:
			cost = 0.5
		case r < 3:
			cost = 2.5
		case r < 4:
			cost = rng.Float64()*1.2*l.Capacity() + 0.01
		}
		eff := now // the instant the algorithm decides at
		if l.Algorithm != LeakyBucket && s.T > now {
			eff = s.T
		}
		next, d := l.Decide(s, now, cost)

		// The decision is well formed.
		if d.Remaining < 0 || d.Remaining > l.Capacity()+1e-6 || math.IsNaN(d.Remaining) {
			fail(step, "Remaining %v outside [0, %v]", d.Remaining, l.Capacity())
		}
		if d.Allowed != (d.RetryAfter == 0) || d.Reset < 0 || d.Delay < 0 {
			fail(step, "malformed decision %+v", d)
		}
		if (cost > l.Capacity()+Eps) != (d.RetryAfter == Never) {
			fail(step, "cost %v, capacity %v: RetryAfter %v", cost, l.Capacity(), d.RetryAfter)
		}
		if d.Delay != 0 && (l.MaxDelay == 0 && l.Algorithm != LeakyBucket || l.Algorithm != LeakyBucket && l.Algorithm != TokenBucket) {
			fail(step, "Delay %v from %s with max_delay %v", d.Delay, l.Algorithm, l.MaxDelay)
		}
		if l.Algorithm == TokenBucket && d.Delay > l.MaxDelay+1 {
			fail(step, "token_bucket Delay %v above MaxDelay %v", d.Delay, l.MaxDelay)
		}

		if d.Allowed {
			at := eff
			if l.Algorithm == TokenBucket {
				at += int64(d.Delay) // a delayed request proceeds once its tokens are there
			}
			adm = append(adm, propAdmission{at: at, window: next.T, cost: cost})
			if l.Algorithm == LeakyBucket {
				start := now + int64(d.Delay)
				if l.MaxDelay > 0 && d.Delay > l.MaxDelay {
					fail(step, "Delay %v above MaxDelay", d.Delay)
				}
				if q := float64(d.Delay)/l.Unit() + cost; q > l.Capacity()+1e-6 {
					fail(step, "queue of %v above capacity %v", q, l.Capacity())
				}
				if len(adm) > 1 && float64(start-lastStart) < lastCost*l.Unit()-1 {
					fail(step, "departs %v after the previous request of cost %v", time.Duration(start-lastStart), lastCost)
				}
				lastStart, lastCost = start, cost
			}
		} else if d.RetryAfter != Never {
			// Waiting RetryAfter is enough; waiting 99 % of it is not.
			if _, e := l.Decide(s, eff+int64(d.RetryAfter), cost); !e.Allowed {
				fail(step, "rejected after waiting RetryAfter %v: %+v", d.RetryAfter, e)
			}
			if d.RetryAfter >= time.Millisecond {
				if _, e := l.Decide(s, eff+int64(d.RetryAfter)*99/100, cost); e.Allowed {
					fail(step, "admitted after 99 %% of RetryAfter %v", d.RetryAfter)
				}
			}
		}

		if step%25 == 0 {
			exp := l.Expiry(s)
			if exp < eff {
				exp = eff
			}
			_, got := l.Decide(s, exp, 1)
			_, want := l.Decide(State{}, exp, 1)
			if got != want {
				fail(step, "at Expiry: %+v, the zero State gives %+v", got, want)
			}
		}
		if d.Allowed || keepRejected {
			s = next
		}
	}
	if len(adm) == 0 {
		fail(steps, "nothing admitted")
	}
	propCheckRates(t, l, adm, func(format string, args ...interface{}) { fail(steps, format, args...) })
}

// propCheckRates checks the rate bounds of the algorithm on the admissions.
func propCheckRates(t *testing.T, l *Limit, adm []propAdmission, fail func(string, ...interface{})) {
	t.Helper()
	const tol = 1e-6
	sort.SliceStable(adm, func(i, j int) bool { return adm[i].at < adm[j].at })
	es := make([]LogEntry, len(adm))
	for i, a := range adm {
		es[i] = LogEntry{T: a.at, Cost: a.cost}
	}
	switch l.Algorithm {
	case TokenBucket:
		// For every pair i ≤ j: cost admitted in [t_i, t_j] ≤ B + r·(t_j − t_i),
		// i.e. S_j − r·t_j + max over i ≤ j of (r·t_i − S_{i−1}) ≤ B, with S the
		// prefix sums and instants relative to the first admission.
		r := l.Rate.Quota / float64(l.PeriodNanos())
		t0 := adm[0].at
		best, prev, sum := math.Inf(-1), 0.0, 0.0
		for j, a := range adm {
			x := r*float64(a.at-t0) - prev
			if x > best {
				best = x
			}
			sum += a.cost
			prev = sum
			if got := sum - r*float64(a.at-t0) + best; got > l.Capacity()+tol {
				fail("token_bucket: up to admission %d, %v above Capacity + rate·T", j, got-l.Capacity())
			}
		}
	case SlidingWindowLog:
		if w := maxWindowSum(es, l.PeriodNanos()); w > l.Rate.Quota+tol {
			fail("sliding_window_log: %v admitted within one period, quota %v", w, l.Rate.Quota)
		}
	case FixedWindow, SlidingWindowCounter:
		per := make(map[int64]float64)
		for _, a := range adm {
			per[a.window] += a.cost
			if a.window != a.at-mod(a.at, l.PeriodNanos()) {
				fail("%s: admission at %d counted in the window starting %d", l.Algorithm, a.at, a.window)
			}
		}
		for w, c := range per {
			if c > l.Rate.Quota+tol {
				fail("%s: %v admitted in the window starting %d, quota %v", l.Algorithm, c, w, l.Rate.Quota)
			}
		}
		if w := maxWindowSum(es, l.PeriodNanos()); w > 2*l.Rate.Quota+tol {
			fail("%s: %v admitted within one period, above twice the quota %v", l.Algorithm, w, l.Rate.Quota)
		}
	}
}

// mod is the non-negative remainder of a by b (b > 0).
func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
