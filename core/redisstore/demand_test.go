package redisstore

import (
	"context"
	"math"
	"math/rand"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/resp"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
)

// demandOnRedis starts a Redis server and returns a client of it and a
// limit of alg and rate named name plus this run's nonce.
func demandOnRedis(t *testing.T, name string, alg model.Algorithm, rate string) (*resp.Client, *model.Limit) {
	t.Helper()
	srv := redistest.Start(t, redistest.Options{})
	return resptest.Client(t, srv.Addr, 2), coretest.Limit(t, name+"-"+coretest.Nonce, alg, rate, 0, 0)
}

// newTestDemand returns the Demand of l in zone "z" of a new store on
// client, keeping maxKeys keys a period, on a clock stopped at now; closed
// when the test ends.
func newTestDemand(t *testing.T, client *resp.Client, l *model.Limit, maxKeys int, now int64) *Demand {
	t.Helper()
	d := newTestRedisStore(t, client, false).Demand(l, "z", maxKeys, func() int64 { return now })
	t.Cleanup(d.Close)
	return d
}

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
	end := start + periods*period + demandLag // period 29 sent by every instance
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
	client, l := demandOnRedis(t, "later", model.TokenBucket, "10/1s")
	s := newTestRedisStore(t, client, false)
	now := time.Now().UnixNano()
	d := s.Demand(l, "a{b}", 0, nil)
	d.Recorder().Add(now, "k", 2)
	key := d.periodKeys(now / l.PeriodNanos())[0]
	deadline := time.Now().Add(5 * time.Second)
	for {
		v, err := client.Do(context.Background(), "ZSCORE", key, strconv.FormatUint(demand.FleetKey("k"), 36))
		if err == nil && v == "2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the partial not in Redis after 5 s: %v, %v", v, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gatedScripter records the script calls it answers, holding the first
// until gate is closed.
type gatedScripter struct {
	gate  chan struct{}
	n     int32
	mu    sync.Mutex
	calls int
}

func (s *gatedScripter) EvalSha(ctx context.Context, sha string, keys, args []string) (interface{}, error) {
	if atomic.AddInt32(&s.n, 1) == 1 {
		<-s.gate
	}
	s.mu.Lock()
	s.calls++
	s.mu.Unlock()
	return int64(0), nil
}

func (s *gatedScripter) ScriptLoad(ctx context.Context, script string) (string, error) {
	return "", nil
}

func (s *gatedScripter) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls
}

// TestDemandWakeDuringFlush: a key's period that opens while the sending
// goroutine sends (having found no period open) is still sent, by the
// same goroutine going on or by a new one.
func TestDemandWakeDuringFlush(t *testing.T) {
	sc := &gatedScripter{gate: make(chan struct{})}
	s := newTestRedisStore(t, sc, false)
	l := coretest.Limit(t, "wake", model.TokenBucket, "10/1s", 0, 0)
	d := s.Demand(l, "z", 0, nil)
	t.Cleanup(d.Close)
	d.Recorder().Add(time.Now().UnixNano()-int64(2*time.Second), "old", 1) // a period over: the goroutine starts
	deadline := time.Now().Add(5 * time.Second)
	for atomic.LoadInt32(&sc.n) == 0 { // the goroutine sends old's period
		if time.Now().After(deadline) {
			t.Fatal("nothing sent after 5 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.Recorder().Add(time.Now().UnixNano(), "new", 5) // opens a period meanwhile
	close(sc.gate)
	for sc.count() < 2 {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatal("the period opened during a send was never sent")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDemandClose: Close sends the open periods too, and stops.
func TestDemandClose(t *testing.T) {
	client, l := demandOnRedis(t, "close", model.TokenBucket, "10/1h")
	s := newTestRedisStore(t, client, false)
	now := time.Now().UnixNano()
	d := s.Demand(l, "z", 0, nil)
	d.Recorder().Add(now, "k", 3) // an hour's period, open
	d.Close()
	key := d.periodKeys(now / l.PeriodNanos())[0]
	if v, err := client.Do(context.Background(), "ZSCORE", key, strconv.FormatUint(demand.FleetKey("k"), 36)); err != nil || v != "3" {
		t.Errorf("after Close, the open period's part in Redis: %v, %v; want 3", v, err)
	}
}

// TestDemandReadsLargePeriods: a period of more keys than one read
// returns is read whole, each key once.
func TestDemandReadsLargePeriods(t *testing.T) {
	client, l := demandOnRedis(t, "large", model.FixedWindow, "10/1m")
	period := l.PeriodNanos()
	start := 29_000_000 * period
	d := newTestRedisStore(t, client, false).Demand(l, "z", 10000, func() int64 { return start })
	const keys = 2500
	for i := 0; i < keys; i++ {
		d.Recorder().Add(start, "k"+strconv.Itoa(i), 1)
	}
	end := start + period + demandLag
	snap, err := d.Snapshot(context.Background(), end)
	if err != nil || snap.Periods.Count() != keys || snap.Keys.Count() != keys || snap.Periods.Sum() != keys {
		t.Errorf("%d key-periods, %d keys, cost %v (%v); want %d of each", snap.Periods.Count(), snap.Keys.Count(), snap.Periods.Sum(), err, keys)
	}
}

// TestDemandHugePeriod: a period of 20 years, whose 26 periods no
// Duration holds, still gives its hash and the reset's mark a positive
// time to live (an overflow made it negative, and PEXPIRE deleted the
// hash), and a Snapshot a start between the epoch and now.
func TestDemandHugePeriod(t *testing.T) {
	client, l := demandOnRedis(t, "huge", model.TokenBucket, "1000/175200h")
	s := newTestRedisStore(t, client, false)
	now := time.Now().UnixNano()
	d := s.Demand(l, "z", 0, func() int64 { return now })
	ctx := context.Background()
	d.Recorder().Add(now, "k", 2)
	d.Close() // sends the open period
	key := d.periodKeys(now / l.PeriodNanos())[0]
	if ttl, err := client.Do(ctx, "PTTL", key); err != nil || !(ttl.(int64) > 0) {
		t.Errorf("the period's keys: PTTL %v (%v), want a positive time to live", ttl, err)
	}
	snap, err := d.Snapshot(ctx, now)
	if err != nil || snap.Since < 0 || snap.Since > now {
		t.Errorf("snapshot since %d (%v), want an instant between the epoch and now (%d)", snap.Since, err, now)
	}
	if err := d.Reset(ctx, now); err != nil {
		t.Fatal(err)
	}
	if ttl, err := client.Do(ctx, "PTTL", d.base+"since"); err != nil || !(ttl.(int64) > 0) {
		t.Errorf("the reset's mark: PTTL %v (%v), want a positive time to live", ttl, err)
	}
}

// demandFields counts what Redis holds of d: the fields of its hashes, the
// members of its sorted sets and its strings, and each key's time to live
// in milliseconds.
func demandFields(t *testing.T, client *resp.Client, d *Demand) (fields int64, ttls []int64) {
	t.Helper()
	ctx := context.Background()
	pattern := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`, "]", `\]`).Replace(d.base) + "*"
	reply, err := client.Do(ctx, "KEYS", pattern)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range reply.([]interface{}) {
		key := k.(string)
		reply, err := client.Do(ctx, "TYPE", key)
		if err != nil {
			t.Fatal(err)
		}
		typ, _ := reply.(string)
		var n interface{}
		switch typ {
		case "hash":
			n, err = client.Do(ctx, "HLEN", key)
		case "zset":
			n, err = client.Do(ctx, "ZCARD", key)
		default:
			n = int64(1)
		}
		if err != nil {
			t.Fatal(err)
		}
		fields += n.(int64)
		ttl, err := client.Do(ctx, "PTTL", key)
		if err != nil {
			t.Fatal(err)
		}
		ttls = append(ttls, ttl.(int64))
	}
	return fields, ttls
}

// TestDemandBoundInRedis: 3,000 one-off keys over two days of a limit of
// 1,000 a day, with demand_keys 256, leave at most 256 keys a period in
// Redis and the sketch of the others' key-periods (one bucket, its count,
// their sum and largest: 4 fields), 2 × 256 + 8 fields in all, each living
// no longer than the retention; the fleet's figures still count every
// key-period, the others' as partial, and the 8 keys that ask 40 a day
// (their parts sent by two instances) keep their key-periods whole.
func TestDemandBoundInRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 2)
	ctx := context.Background()
	l := coretest.Limit(t, "bound-"+coretest.Nonce, model.TokenBucket, "1000/24h", 0, 0)
	period := l.PeriodNanos()
	start := 20000 * period
	a := newTestDemand(t, client, l, 256, start)
	b := newTestDemand(t, client, l, 256, start)
	const oneOff, heavy = 3000, 8
	for i := 0; i < oneOff; i++ {
		p := int64(i / (oneOff / 2))
		now := start + p*period + int64(i%(oneOff/2))*(period/oneOff)
		d := a
		if i%2 == 1 {
			d = b
		}
		d.Recorder().Add(now, "once-"+strconv.Itoa(i), 1)
		if i%(oneOff/2) < heavy {
			a.Recorder().Add(now, "heavy-"+strconv.Itoa(i%(oneOff/2)), 20)
			b.Recorder().Add(now, "heavy-"+strconv.Itoa(i%(oneOff/2)), 20)
		}
		if i%100 == 99 { // as the sending goroutine would, within the recorders' bound
			if err := a.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if err := b.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	end := start + 2*period + demandLag
	for _, d := range []*Demand{a, b} {
		d.Recorder().Snapshot(end) // folds the second day
		if err := d.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if n := d.Recorder().Dropped(); n != 0 {
			t.Fatalf("%d partials dropped by a recorder", n)
		}
	}
	fields, ttls := demandFields(t, client, a)
	if bound := int64(2*256 + 8); fields > bound {
		t.Errorf("Redis holds %d fields of the zone's demand, want at most %d", fields, bound)
	}
	retention := int64(a.retention() / time.Millisecond)
	for _, ttl := range ttls {
		if ttl <= 0 || ttl > retention {
			t.Errorf("a key lives %d ms, want at most the retention, %d ms", ttl, retention)
		}
	}
	s, err := a.Snapshot(ctx, end)
	if err != nil {
		t.Fatal(err)
	}
	const keyPeriods = oneOff + 2*heavy
	if s.Periods.Count() != keyPeriods || s.Periods.Sum() != oneOff+2*heavy*40 || s.Keys.Count() != oneOff+heavy {
		t.Errorf("%d key-periods of cost %v, %d keys; want %d, %d, %d", s.Periods.Count(), s.Periods.Sum(), s.Keys.Count(), keyPeriods, oneOff+2*heavy*40, oneOff+heavy)
	}
	if s.Partial != keyPeriods-2*256 {
		t.Errorf("%d partial key-periods, want the %d beyond 256 a day", s.Partial, keyPeriods-2*256)
	}
	if n, _ := s.Periods.Over(30); n.Low != 2*heavy || n.High != 2*heavy {
		t.Errorf("%v key-periods above 30, want the %d of the heavy keys, whole", n, 2*heavy)
	}
}

// TestDemandEvictedSketch: the script's sketch of evicted key-periods
// buckets each demand as demand.Sketch does: a period of one key kept and
// 2,000 evicted, of demands from 3e-4 to 4e9, reads back as the sketch
// of those demands.
func TestDemandEvictedSketch(t *testing.T) {
	client, l := demandOnRedis(t, "sketch", model.FixedWindow, "10/1m")
	period := l.PeriodNanos()
	start := 29_000_000 * period
	d := newTestDemand(t, client, l, 1, start)
	rng := rand.New(rand.NewSource(7))
	var want demand.Sketch
	var parts []demand.Partial
	for i := 0; i < 2001; i++ {
		v := math.Exp(rng.Float64()*30 - 8)
		want.Add(v)
		parts = append(parts, demand.Partial{Period: start / period, Key: uint64(i), Demand: v})
	}
	ctx := context.Background()
	if err := d.add(ctx, parts); err != nil {
		t.Fatal(err)
	}
	if n, err := client.Do(ctx, "ZCARD", d.periodKeys(start / period)[0]); err != nil || n != int64(1) {
		t.Fatalf("the period holds %v keys (%v), want 1", n, err)
	}
	s, err := d.Snapshot(ctx, start+period+demandLag)
	if err != nil {
		t.Fatal(err)
	}
	if s.Periods.Count() != want.Count() || s.Partial != want.Count()-1 || math.Abs(s.Periods.Sum()-want.Sum()) > 1e-9*want.Sum() {
		t.Fatalf("%d key-periods (%d partial) of sum %v, want %d (%d) of %v", s.Periods.Count(), s.Partial, s.Periods.Sum(), want.Count(), want.Count()-1, want.Sum())
	}
	for q := 0.0; q <= 1; q += 1.0 / 64 {
		if g, w := s.Periods.Quantile(q), want.Quantile(q); g != w {
			t.Errorf("quantile %v: %v, want %v", q, g, w)
		}
	}
}

// TestDemandSmallerBound: a period's keys written by an instance of a
// larger bound are brought within a smaller one's by its next call, each
// key-period kept or folded into the sketch.
func TestDemandSmallerBound(t *testing.T) {
	client, l := demandOnRedis(t, "smaller", model.FixedWindow, "10/1m")
	period := l.PeriodNanos()
	start := 29_000_000 * period
	big := newTestDemand(t, client, l, 300, start)
	small := newTestDemand(t, client, l, 256, start)
	var parts []demand.Partial
	for i := 0; i < 300; i++ {
		parts = append(parts, demand.Partial{Period: start / period, Key: uint64(i), Demand: float64(1 + i)})
	}
	ctx := context.Background()
	if err := big.add(ctx, parts); err != nil {
		t.Fatal(err)
	}
	if err := small.add(ctx, []demand.Partial{{Period: start / period, Key: 299, Demand: 1}}); err != nil {
		t.Fatal(err)
	}
	if n, err := client.Do(ctx, "ZCARD", small.periodKeys(start / period)[0]); err != nil || n != int64(256) {
		t.Errorf("the period holds %v keys (%v), want 256", n, err)
	}
	s, err := small.Snapshot(ctx, start+period+demandLag)
	if err != nil || s.Periods.Count() != 300 || s.Partial != 44 || s.Periods.Sum() != 300*301/2+1 {
		t.Errorf("%d key-periods (%d partial) of sum %v (%v), want 300 (44) of %d", s.Periods.Count(), s.Partial, s.Periods.Sum(), err, 300*301/2+1)
	}
}

// TestDemandOpenKeyPeriods: a fleet's advice says how many key-periods it
// does not count yet, this instance's open ones and those Redis holds of
// the periods not yet read, and when the first of them counts: once every
// instance has had the time to send its period.
func TestDemandOpenKeyPeriods(t *testing.T) {
	client, l := demandOnRedis(t, "open", model.FixedWindow, "10/1m")
	period := l.PeriodNanos()
	start := 29_000_000 * period
	a := newTestDemand(t, client, l, 0, start)
	b := newTestDemand(t, client, l, 0, start)
	ctx := context.Background()
	a.Recorder().Add(start+1, "a", 1)
	b.Recorder().Add(start+2, "b", 1)
	b.Recorder().Add(start+3, "c", 1)
	end := start + period
	check := func(when string, now int64, open int, first int64) {
		t.Helper()
		adv, err := a.Advise(ctx, "z", l, now, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := int64(0)
		if adv.FirstComplete != nil {
			got = adv.FirstComplete.UnixNano()
		}
		if adv.OpenKeyPeriods != open || got != first {
			t.Errorf("%s: %d key-periods open, the first complete at %d; want %d and %d", when, adv.OpenKeyPeriods, got, open, first)
		}
	}
	check("mid-period", start+period/2, 1, end+demandLag) // b's are b's own until sent
	b.Recorder().Snapshot(end + 1)
	if err := b.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	check("sent, within the lag", end+1, 3, end+demandLag)
	check("read", end+demandLag, 0, 0)
	if adv, err := a.Advise(ctx, "z", l, end+demandLag, nil); err != nil || adv.KeyPeriods != 3 {
		t.Errorf("once read: %d key-periods (%v), want 3", adv.KeyPeriods, err)
	}
}
