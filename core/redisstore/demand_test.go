package redisstore

import (
	"context"
	"math"
	"net/url"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
)

// TestDemandFleet: two instances on one Redis each see part of every
// key's asks; the fleet's snapshot holds each key-period's whole demand,
// as an exact replay computes it, over the window of the last
// DemandPeriods complete periods; a reset in one instance empties it for
// the other.
func TestDemandFleet(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 4)
	checkDemandFleet(t, newTestRedisStore(t, client, false), newTestRedisStore(t, client, false))
}

// TestDemandFleetCluster: the same on a Redis Cluster, whose keys of one
// limit's demand share a hash slot.
func TestDemandFleetCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	cs := resptest.NewClusterScripter(t, cluster.Addrs)
	checkDemandFleet(t, newTestRedisStore(t, cs, true), newTestRedisStore(t, cs, true))
}

func checkDemandFleet(t *testing.T, sa, sb *Store) {
	ctx := context.Background()
	l := coretest.Limit(t, "fleet-"+coretest.Nonce, model.FixedWindow, "10/1m", 0, 0)
	period := l.PeriodNanos()
	start := 29_000_000 * period // a period's start
	clock := func() int64 { return start }
	a, b := sa.Demand(l, "srv0/", 0, clock), sb.Demand(l, "srv0/", 0, clock)
	want := map[int64]map[string]float64{} // period → key → demand
	const periods, perPeriod = 30, 100
	for i := 0; i < periods*perPeriod; i++ {
		p := int64(i / perPeriod)
		now := start + p*period + int64(i%perPeriod)*period/perPeriod
		key := "k" + strconv.Itoa(i*7%50)
		cost := float64(1 + i%3)
		d := a
		if i%3 == 0 {
			d = b
		}
		d.Recorder().Add(now, key, cost)
		if want[p] == nil {
			want[p] = map[string]float64{}
		}
		want[p][key] += cost
	}
	end := start + periods*period + a.lag() // period 29 sent by every instance
	b.Recorder().Snapshot(end)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := a.Snapshot(ctx, end)
	if err != nil {
		t.Fatal(err)
	}
	first, last := a.window(end)
	if last != periods-1+start/period || first != last-DemandPeriods+1 {
		t.Fatalf("window %d..%d, want the last %d of the %d periods", first-start/period, last-start/period, DemandPeriods, periods)
	}
	var exact []float64
	peaks := map[string]float64{}
	sum := 0.0
	for p := first - start/period; p <= last-start/period; p++ {
		for k, v := range want[p] {
			exact = append(exact, v)
			sum += v
			if v > peaks[k] {
				peaks[k] = v
			}
		}
	}
	sort.Float64s(exact)
	if s.Periods.Count() != uint64(len(exact)) || s.Keys.Count() != uint64(len(peaks)) || math.Abs(s.Periods.Sum()-sum) > 1e-6 {
		t.Fatalf("fleet: %d key-periods, %d keys, cost %v; want %d, %d, %v", s.Periods.Count(), s.Keys.Count(), s.Periods.Sum(), len(exact), len(peaks), sum)
	}
	if s.Since != first*period {
		t.Errorf("since %d, want the window's first period's start %d", s.Since, first*period)
	}
	for _, q := range []float64{0.5, 0.9, 0.99, 1} {
		x := exact[int(math.Ceil(q*float64(len(exact))))-1]
		if got := s.Periods.Quantile(q); math.Abs(got-x) > demand.RelativeError*x {
			t.Errorf("p%v: %v, want %v within %v", q*100, got, x, demand.RelativeError)
		}
	}
	adv, err := a.Advise(ctx, "fleet", l, end, url.Values{"candidate": {"5/1m"}})
	if err != nil || adv.Scope != "fleet" || adv.KeyPeriods != uint64(len(exact)) || adv.Candidates[len(adv.Candidates)-1].Rate != "5/1m" {
		t.Errorf("advice %+v, %v; want the fleet's %d key-periods and the candidate asked", adv, err, len(exact))
	}
	if _, err := a.Advise(ctx, "fleet", l, end, url.Values{"candidate": {"fast"}}); model.FieldOf(err) == nil {
		t.Errorf("a bad candidate: %v, want a FieldError", err)
	}
	if err := a.Reset(ctx, end); err != nil {
		t.Fatal(err)
	}
	if s, err := b.Snapshot(ctx, end); err != nil || s.Periods.Count() != 0 || s.Since < end {
		t.Errorf("after a reset: %d key-periods since %d (%v), want none since %d", s.Periods.Count(), s.Since, err, end)
	}
}

// TestDemandSentWhenQuiet: a key's period reaches Redis once over,
// without a Flush call and without a later request to fold it: the
// sending goroutine folds and sends it.
func TestDemandSentWhenQuiet(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 2)
	s := newTestRedisStore(t, client, false)
	l := coretest.Limit(t, "later-"+coretest.Nonce, model.TokenBucket, "10/1s", 0, 0)
	now := time.Now().UnixNano()
	d := s.Demand(l, "a{b}", 0, nil)
	d.Recorder().Add(now, "k", 2)
	key := d.base + strconv.FormatInt(now/l.PeriodNanos(), 10)
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := client.Do(context.Background(), "HGET", key, strconv.FormatUint(demand.FleetKey("k"), 36))
		if err == nil && v == "2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the partial not in Redis after 5 s: %v, %v", v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
