package core

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/telemetry"
	"github.com/sluicehq/sluice/internal/testclock"
)

// TestServeLaneMeteredMatchesServeLane: ServeLaneMetered answers every
// request as ServeLane does (status, headers, body, whether it went on),
// counts in the meter the verdict of every request that a limit applies
// to, allowed ones included, under the limit whose headers the client
// saw, with its near misses, and times each; it counts nothing of a
// request no limit applies to; the observer sees what it sees under
// ServeLane.
func TestServeLaneMeteredMatchesServeLane(t *testing.T) {
	remotes := []string{"192.0.2.1:1234", "192.0.2.2:80", "[2001:db8::1]:443", "not an address"}
	for _, tc := range []struct {
		many    bool
		alg     model.Algorithm
		headers answer.HeaderSet
	}{
		// One limit: serveLaneMeteredOne, its admissions written out by
		// laneSetIETFX and its rejections by laneReject, or, without
		// those headers, by laneMeteredAnswer; several: Gate.Serve's.
		{false, model.TokenBucket, answer.DefaultHeaders},
		{false, model.SlidingWindowCounter, answer.DefaultHeaders},
		{false, model.TokenBucket, answer.HeadersOff},
		{false, model.LeakyBucket, answer.HeadersIETF | answer.HeadersLegacy},
		{true, model.TokenBucket, answer.DefaultHeaders},
	} {
		many := tc.many
		clock := testclock.New(testclock.Epoch)
		burst := 2.0
		if tc.alg == model.SlidingWindowCounter {
			burst = 0 // its capacity is its quota
		}
		per := gateLimit(t, "per", tc.alg, "3/s", burst)
		if tc.alg == model.LeakyBucket {
			per.MaxDelay = 1 // rejects what it would delay
			if err := per.Validate(); err != nil {
				t.Fatal(err)
			}
		}
		global := gateLimit(t, "global", model.FixedWindow, "7/s", 0)
		limits := []*model.Limit{per}
		if many {
			limits = append(limits, global)
		}
		ipSpec, allSpec := ipAndAllSpecs(t)
		lanes := make([]*Lane, 2)
		var seen [2][]Verdict
		counts := []*Counts{{}, {}}
		seconds := NewHistogram()
		recorders := []*demand.Recorder{demand.NewRecorder(per.PeriodNanos(), 0, clock.Now()), demand.NewRecorder(global.PeriodNanos(), 0, clock.Now())}
		meter := NewMeter(MeterConfig{Limits: limits, Counts: counts[:len(limits)], NearShare: 0.5, Seconds: seconds, Demand: recorders[:len(limits)], Clock: clock.Now})
		// wantDemand holds by limit the cost asked per key and period.
		wantDemand := []map[string]float64{{}, {}}
		var want [2][NumOutcomes]uint64 // by limit
		var wantNear, decided uint64
		// The headers tell a near miss of a token bucket of 2 alone.
		nearKnown := tc.headers == answer.DefaultHeaders && tc.alg == model.TokenBucket && !many
		for i := range lanes {
			i := i
			store, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			gate, err := NewGate(GateConfig{Limits: limits, Store: store, Responder: answer.Responder{Headers: tc.headers}, Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			cfg := LaneConfig{Gate: gate, Asks: []LaneAsk{{Limit: per, Spec: 0, Missing: keyspec.MissingSkip, Cost: 1}},
				Specs: []*keyspec.Spec{ipSpec, allSpec}, Prefix: "mw\x00", Observe: func(v *Verdict) { seen[i] = append(seen[i], *v) }}
			if many {
				cfg.Asks = append(cfg.Asks, LaneAsk{Limit: global, Spec: 1, Cost: 1})
			}
			if i == 1 {
				cfg.Meter = meter
			}
			lanes[i] = NewLane(cfg)
		}
		if lanes[1].one == many {
			t.Fatalf("%+v: lane one %v", tc, lanes[1].one)
		}
		for step := 0; step < 60; step++ {
			label := string(tc.alg) + " headers " + strconv.Itoa(int(tc.headers)) + " many " + strconv.FormatBool(many) + " step " + strconv.Itoa(step)
			remote := remotes[step/3%len(remotes)] // three in a row: near misses, rejections
			var recs [2]*httptest.ResponseRecorder
			var nexts [2]countingHandler
			seen[0], seen[1] = seen[0][:0], seen[1][:0]
			for i := range recs {
				recs[i] = httptest.NewRecorder()
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.RemoteAddr = remote
				if i == 0 {
					ServeLane(lanes[0], &nexts[0], recs[0], r)
				} else {
					ServeLaneMetered(lanes[1], &nexts[1], recs[1], r)
				}
			}
			if recs[0].Code != recs[1].Code || !reflect.DeepEqual(recs[0].Header(), recs[1].Header()) ||
				recs[0].Body.String() != recs[1].Body.String() || nexts[0].n != nexts[1].n {
				t.Fatalf("%s: ServeLane answered %d %v (next %d), ServeLaneMetered %d %v (next %d)", label,
					recs[0].Code, recs[0].Header(), nexts[0].n, recs[1].Code, recs[1].Header(), nexts[1].n)
			}
			if !reflect.DeepEqual(seen[0], seen[1]) {
				t.Fatalf("%s: observed %+v under ServeLane, %+v under ServeLaneMetered", label, seen[0], seen[1])
			}
			period := strconv.FormatInt(clock.Now()/int64(time.Second), 10)
			if remote != "not an address" {
				wantDemand[0][remote+" "+period]++
			}
			if many {
				wantDemand[1][period]++
			}
			if remote != "not an address" || many {
				// The limit reported: the one of RateLimit-Policy's.
				z, o := 0, OutcomeAllowed
				if many && strings.Contains(recs[1].Header().Get("Ratelimit-Policy"), `"global"`) {
					z = 1
				}
				if recs[1].Code == http.StatusTooManyRequests {
					o = OutcomeRejected
				} else if nearKnown && recs[1].Header().Get("X-Ratelimit-Remaining") == "0" {
					wantNear++ // less than half of a capacity of 2 left
				}
				want[z][o]++
				decided++
			}
			for z := range limits {
				for o := Outcome(0); int(o) < NumOutcomes; o++ {
					if got := counts[z].Outcome(o); got != want[z][o] {
						t.Fatalf("%s: limit %s, outcome %v counted %d, want %d", label, limits[z].Name, o, got, want[z][o])
					}
				}
			}
			if nearKnown && counts[0].Near() != wantNear {
				t.Fatalf("%s: %d near misses, want %d", label, counts[0].Near(), wantNear)
			}
			n := uint64(0)
			b, _ := seconds.Snapshot()
			for _, c := range b {
				n += c
			}
			if n != decided {
				t.Fatalf("%s: %d decisions timed, want %d", label, n, decided)
			}
			clock.Advance(100 * time.Millisecond)
		}
		if nearKnown && wantNear == 0 {
			t.Errorf("%+v: no near miss in the trace", tc)
		}
		// Each limit's demand: every ask's cost, admitted or refused, in
		// its key-period.
		clock.Advance(time.Second)
		for z := range limits {
			snap := recorders[z].Snapshot(clock.Now())
			sum := 0.0
			for _, c := range wantDemand[z] {
				sum += c
			}
			if snap.Periods.Count() != uint64(len(wantDemand[z])) || snap.Periods.Sum() != sum {
				t.Errorf("%+v: limit %s recorded %d key-periods asking %v, want %d asking %v", tc, limits[z].Name,
					snap.Periods.Count(), snap.Periods.Sum(), len(wantDemand[z]), sum)
			}
		}
	}
}

// TestHistogramBounds: a Histogram has a bound for each of
// telemetry.DecisionBuckets, in nanoseconds.
func TestHistogramBounds(t *testing.T) {
	b := telemetry.DecisionBuckets()
	h := NewHistogram()
	if len(b) != numDecisionBounds || h.bounds[0] != 50000 || h.bounds[numDecisionBounds-1] != time.Second {
		t.Fatalf("%d buckets, bounds %v; want %d from 50µs to 1s", len(b), h.bounds, numDecisionBounds)
	}
}

// TestServeLaneMeteredFallbackZone: while the store fails, the local
// fallback decides on its shares of the limits, other *model.Limit values
// of the same names; the meter counts each verdict under the limit whose
// headers the client saw, found by name.
func TestServeLaneMeteredFallbackZone(t *testing.T) {
	clock := testclock.New(testclock.Epoch)
	global := gateLimit(t, "global", model.FixedWindow, "2/s", 0)
	per := gateLimit(t, "per", model.TokenBucket, "100/s", 100)
	limits := []*model.Limit{global, per}
	local, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	gate, err := NewGate(GateConfig{Limits: limits, Store: &failingStore{}, Fallback: local, Instances: 1,
		Responder: answer.Responder{Headers: answer.DefaultHeaders}, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	ipSpec, allSpec := ipAndAllSpecs(t)
	counts := []*Counts{{}, {}}
	lane := NewLane(LaneConfig{Gate: gate, Specs: []*keyspec.Spec{ipSpec, allSpec},
		Asks:  []LaneAsk{{Limit: global, Spec: 1, Cost: 1}, {Limit: per, Spec: 0, Missing: keyspec.MissingSkip, Cost: 1}},
		Meter: NewMeter(MeterConfig{Limits: limits, Counts: counts, NearShare: 0.1, Seconds: NewHistogram()})})
	for i := 0; i < 3; i++ {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "192.0.2.1:1234"
		w := httptest.NewRecorder()
		ServeLaneMetered(lane, &countingHandler{}, w, r)
		if policy := w.Header().Get("Ratelimit-Policy"); !strings.Contains(policy, `"global"`) {
			t.Fatalf("request %d: RateLimit-Policy %q, want global's (the tighter)", i, policy)
		}
	}
	if n := counts[0].Outcome(OutcomeAllowed) + counts[0].Outcome(OutcomeRejected); n != 3 || counts[1].Outcome(OutcomeAllowed) != 0 {
		t.Fatalf("global counted %d verdicts, per %d allowed; want all 3 under global", n, counts[1].Outcome(OutcomeAllowed))
	}
}

// TestLaneCountNearMiss: laneCount counts as a near miss exactly the
// verdicts Verdict.NearMiss calls one, which it writes out.
func TestLaneCountNearMiss(t *testing.T) {
	l := &model.Limit{Name: "n", Rate: model.Rate{Quota: 10, Period: time.Second}, Burst: 10}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, v := range []Verdict{
		{Outcome: OutcomeAllowed, Decision: model.Decision{Limit: l, Remaining: 0}},
		{Outcome: OutcomeAllowed, Decision: model.Decision{Limit: l, Remaining: 0.99}},
		{Outcome: OutcomeAllowed, Decision: model.Decision{Limit: l, Remaining: 1}},
		{Outcome: OutcomeAllowed, Decision: model.Decision{Limit: l, Remaining: 9}},
		{Outcome: OutcomeAllowed},
		{Outcome: OutcomeRejected, Decision: model.Decision{Limit: l}},
		{Outcome: OutcomeDryRunRejected, Decision: model.Decision{Limit: l}},
		{Outcome: OutcomeStoreErrorAllow},
		{Outcome: OutcomeCancelled, Decision: model.Decision{Limit: l}},
	} {
		var c Counts
		m := NewMeter(MeterConfig{Limits: []*model.Limit{l}, Counts: []*Counts{&c}, NearShare: 0.1, Seconds: NewHistogram()})
		laneCount(m, &v, 0, time.Millisecond, nil, nil)
		if got, want := c.Near() == 1, v.NearMiss(0.1*l.Capacity()); got != want {
			t.Errorf("%+v: laneCount counted a near miss %v, NearMiss says %v", v, got, want)
		}
	}
}
