package core

import (
	"math"
	"math/rand"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// TestRefundNeverBeatsReplay: refunding any admission of a random history
// never leaves more capacity than replaying the history without it, at
// the refund and after it, and leaves exactly as much when the refunded
// admission is the last (issue 20, item 6). The scripts match
// model.Settle (TestRedisStoreMatchesMemoryStore), so this holds on Redis
// too.
func TestRefundNeverBeatsReplay(t *testing.T) {
	limits := []*model.Limit{
		coretest.Limit(t, "t", model.TokenBucket, "10/s", 10, 0),
		coretest.Limit(t, "t", model.TokenBucket, "7/s", 3, 0),
		coretest.Limit(t, "t", model.TokenBucket, "10/s", 2, 400*time.Millisecond),
		coretest.Limit(t, "t", model.LeakyBucket, "10/s", 5, 0),
		coretest.Limit(t, "t", model.LeakyBucket, "7/s", 4, 300*time.Millisecond),
		coretest.Limit(t, "t", model.FixedWindow, "5/s", 0, 0),
		coretest.Limit(t, "t", model.SlidingWindowCounter, "5/s", 0, 0),
		coretest.Limit(t, "t", model.SlidingWindowLog, "5/s", 0, 0),
	}
	costs := []float64{1, 1, 1, 0.5, 2, 2.5}
	probes := []time.Duration{0, 30 * time.Millisecond, 150 * time.Millisecond, 400 * time.Millisecond, time.Second, 3 * time.Second}
	rng := rand.New(rand.NewSource(20))
	type charge struct {
		at   int64
		cost float64
		d    model.Decision
	}
	for _, l := range limits {
		compared := 0
		for trial := 0; trial < 2000; trial++ {
			var s model.State
			var hist []charge
			now := testclock.Epoch
			for i := 1 + rng.Intn(12); i > 0; i-- {
				now += rng.Int63n(int64(250 * time.Millisecond))
				cost := costs[rng.Intn(len(costs))]
				next, d := coretest.Decide(l, s, now, cost)
				if d.Allowed {
					s = next
					hist = append(hist, charge{now, cost, d})
				}
			}
			if len(hist) == 0 {
				continue
			}
			k := rng.Intn(len(hist))
			if rng.Intn(2) == 0 {
				now += rng.Int63n(int64(300 * time.Millisecond))
			}
			got := coretest.CopyState(s)
			model.Settle(l, &got, now, hist[k].cost, 0, &hist[k].d.Mark)
			var replay model.State
			admitted := true
			for i, c := range hist {
				if i == k {
					continue
				}
				next, d := coretest.Decide(l, replay, c.at, c.cost)
				if admitted = d.Allowed; !admitted {
					break
				}
				replay = next
			}
			if !admitted {
				continue // another history: no capacity to compare with
			}
			compared++
			last := k == len(hist)-1
			for _, p := range probes {
				// The capacity, as Remaining of a cost no limit admits,
				// and whether a request of 1 would pass.
				at := now + int64(p)
				_, dg := coretest.Decide(l, got, at, math.Inf(1))
				_, dr := coretest.Decide(l, replay, at, math.Inf(1))
				_, pg := coretest.Decide(l, got, at, 1)
				_, pr := coretest.Decide(l, replay, at, 1)
				if dg.Remaining > dr.Remaining+1e-6 || pg.Allowed && !pr.Allowed || last && math.Abs(dg.Remaining-dr.Remaining) > 1e-6 {
					t.Fatalf("%s %v burst %v max delay %v, trial %d: refunding admission %d of %d (cost %v at +%v) at +%v, then at +%v: %+v; the history without it: %+v",
						l.Algorithm, l.Rate, l.Burst, l.MaxDelay, trial, k+1, len(hist), hist[k].cost,
						time.Duration(hist[k].at-testclock.Epoch), time.Duration(now-testclock.Epoch), p, dg, dr)
				}
			}
		}
		if compared < 1000 {
			t.Errorf("%s %v: only %d histories compared", l.Algorithm, l.Rate, compared)
		}
	}
}
