package core

import (
	"context"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/core/hostkey"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/testclock"
)

// countingHandler counts the requests that reach it. Its parameters are
// named: Yaegi v0.16.1 misassigns the frame of an interpreted method with
// unnamed parameters called through an interface.
type countingHandler struct{ n int }

func (c *countingHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.n++ }

// TestServeLaneMatchesGate: a lane that takes ServeLane's written-out
// token bucket path answers every request exactly as Gate.Serve answers
// the same asks on the general path (Decide, the store's Take, answer):
// status, headers, body and whether the request went on, over random
// traces of arrivals, costs and clients, for every header set.
func TestServeLaneMatchesGate(t *testing.T) {
	// Token buckets take serveLaneTB's path, the other algorithms
	// serveLaneOne's. The leaky_bucket's max delay of 1 ns rejects what it
	// would delay, which the test would have to wait out.
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	limits := []struct {
		alg      model.Algorithm
		rate     string
		burst    float64
		cost     float64
		maxDelay time.Duration
	}{
		{model.TokenBucket, "3/s", 0, 1, 0},
		{model.TokenBucket, "100/m", 20, 1, 0},
		{model.TokenBucket, "2.5/s", 5, 0.5, 0},
		{model.TokenBucket, "10/h", 3, 2.5, 0},
		{model.TokenBucket, "1000000000/s", 1000000000, 1, 0},
		{model.FixedWindow, "5/s", 0, 1, 0},
		{model.SlidingWindowCounter, "10/m", 0, 2, 0},
		{model.SlidingWindowLog, "4/s", 0, 1, 0},
		{model.LeakyBucket, "3/s", 4, 1, 1},
		// MaxDelay on a token bucket: the requests it delays come with a
		// cancelled context, so they are refunded at once instead of
		// waited out.
		{model.TokenBucket, "5/s", 2, 1, 150 * time.Millisecond},
	}
	headerSets := []answer.HeaderSet{answer.DefaultHeaders, answer.HeadersIETF, answer.HeadersX, answer.HeadersIETF | answer.HeadersLegacy | answer.HeadersX, answer.HeadersOff}
	remotes := []string{"192.0.2.1:1234", "192.0.2.2:80", "[2001:db8::1]:443", "not an address", ""}
	steps := 300
	if testing.Short() {
		steps = 60
	}
	rng := rand.New(rand.NewSource(11))
	for li, lc := range limits {
		for hi, hs := range headerSets {
			for _, missing := range []keyspec.MissingKey{keyspec.MissingSkip, keyspec.MissingShared} {
				clock := testclock.New(testclock.Epoch)
				l := gateLimit(t, "api", lc.alg, lc.rate, lc.burst)
				if l.MaxDelay = lc.maxDelay; l.Validate() != nil {
					t.Fatalf("max delay %v refused", lc.maxDelay)
				}
				// Every body format, and a jitter (which takes the
				// general rejection path) in some runs; the header set of
				// laneReject with a body in all but one.
				body := answer.BodyFormat((li + hi) % 4)
				if hi == 0 {
					body = answer.BodyFormat(li % 3)
				}
				resp := answer.Responder{Headers: hs, Body: body}
				if (li+hi)%3 == 2 {
					resp.Jitter, resp.Rand = 0.5, func() float64 { return 0.25 }
				}
				laneGate, slowGate := laneGates(t, []*model.Limit{l}, resp, clock)
				spec, err := keyspec.Parse(nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				var seen []Verdict
				lane := NewLane(LaneConfig{Gate: laneGate, Asks: []LaneAsk{{Limit: l, Missing: missing, Cost: lc.cost}}, Specs: []*keyspec.Spec{spec}, Prefix: "mw\x00",
					Observe: func(v *Verdict) { seen = append(seen, *v) }})
				// Bit tests: Yaegi v0.16.1 compares hs with the constant
				// DefaultHeaders wrongly.
				fast := hs&answer.HeadersIETF != 0 && hs&answer.HeadersX != 0 && hs&answer.HeadersLegacy == 0
				if !lane.one || lane.tb != (lc.alg == model.TokenBucket) || lane.fast != fast {
					t.Fatalf("lane one %v tb %v fast %v for %s and headers %v", lane.one, lane.tb, lane.fast, lc.alg, hs)
				}
				if reject := fast && resp.Jitter == 0 && resp.Body != answer.BodyNone; lane.fastReject != reject {
					t.Fatalf("lane fastReject %v for headers %v, body %v, jitter %v", lane.fastReject, hs, resp.Body, resp.Jitter)
				}
				label := string(lc.alg) + " limit " + strconv.Itoa(li) + " headers " + strconv.Itoa(int(hs)) + " missing " + strconv.Itoa(int(missing))
				for step := 0; step < steps; step++ {
					remote := remotes[rng.Intn(len(remotes))]
					if l.MaxDelay > 0 && lc.alg == model.TokenBucket && rng.Intn(3) == 0 {
						// Tokens lent and not given back: another taker of
						// the same key, straight from both stores, whose
						// Take charges a delay without waiting it, puts
						// the bucket into debt.
						r := httptest.NewRequest(http.MethodGet, "/", nil)
						r.RemoteAddr = remote
						key, ok := spec.Key(r)
						if key, ok = hostkey.Resolve(missing, key, ok); ok {
							asks := []model.Ask{{Limit: l, Key: "mw\x00" + key, Cost: lc.cost}}
							laneGate.mem.Take(context.Background(), asks, make([]model.Decision, 1))
							slowGate.cfg.Store.Take(context.Background(), asks, make([]model.Decision, 1))
						}
					}
					seen = seen[:0]
					serveBoth(t, label+" step "+strconv.Itoa(step), lane, slowGate, cancelled, remote, func(r *http.Request) []model.Ask {
						key, ok := spec.Key(r)
						if key, ok = hostkey.Resolve(missing, key, ok); ok {
							return []model.Ask{{Limit: l, Key: "mw\x00" + key, Cost: lc.cost}}
						}
						return nil
					}, &seen)
					clock.Advance(time.Duration(rng.Int63n(int64(300 * time.Millisecond))))
				}
			}
		}
	}
}

// serveBoth serves a request from remote, in ctx, by lane and by gate
// with the asks that asks builds, and fails t unless both answer alike
// (status, headers, body, whether the request went on) and the lane
// observed, in seen, the gate's verdict, or nothing for a request simply
// allowed.
func serveBoth(t *testing.T, label string, lane *Lane, gate *Gate, ctx context.Context, remote string, asks func(*http.Request) []model.Ask, seen *[]Verdict) {
	t.Helper()
	serveBothRequest(t, label, lane, gate, func() *http.Request {
		r := httptest.NewRequest(http.MethodGet, "/", nil).WithContext(ctx)
		r.RemoteAddr = remote
		return r
	}, asks, seen)
}

// serveBothRequest is serveBoth for requests that newRequest makes.
func serveBothRequest(t *testing.T, label string, lane *Lane, gate *Gate, newRequest func() *http.Request, asks func(*http.Request) []model.Ask, seen *[]Verdict) {
	t.Helper()
	var recs [2]*httptest.ResponseRecorder
	var nexts [2]countingHandler
	var remote string
	for i := range recs {
		recs[i] = httptest.NewRecorder()
		r := newRequest()
		remote = r.RemoteAddr
		if i == 0 {
			ServeLane(lane, &nexts[0], recs[0], r)
			continue
		}
		v, pass := gate.Serve(recs[1], r, asks(r))
		if pass {
			nexts[1].n++
		}
		// The lane reports what is not simply allowed.
		if v.Outcome == OutcomeAllowed && v.Delay == 0 {
			if len(*seen) != 0 {
				t.Fatalf("%s: lane observed %+v of an allowed request", label, *seen)
			}
		} else if len(*seen) != 1 || !reflect.DeepEqual((*seen)[0], v) {
			t.Fatalf("%s: lane observed %+v, gate's verdict %+v", label, *seen, v)
		}
	}
	if recs[0].Code != recs[1].Code || !reflect.DeepEqual(recs[0].Header(), recs[1].Header()) ||
		recs[0].Body.String() != recs[1].Body.String() || nexts[0].n != nexts[1].n {
		t.Fatalf("%s, client %q: lane answered %d %v %q (next %d), gate %d %v %q (next %d)", label, remote,
			recs[0].Code, recs[0].Header(), recs[0].Body, nexts[0].n, recs[1].Code, recs[1].Header(), recs[1].Body, nexts[1].n)
	}
}

// TestServeLaneRelayedMatchesGate: behind trusted proxies, with the client
// named by X-Forwarded-For or by Forwarded, with a depth or without, the
// lane keys requests as keyspec.Spec.Key does.
func TestServeLaneRelayedMatchesGate(t *testing.T) {
	trusted := mustPrefixes(t, "192.0.2.0/24")
	remotes := []string{"192.0.2.1:1234", "198.51.100.9:80", "[2001:db8::1]:443", "not an address"}
	values := []string{"203.0.113.1", "203.0.113.2, 192.0.2.7", "198.51.100.1, 203.0.113.1", "unknown", "[2001:db8::7]:80", ""}
	rules := []*clientip.Strategy{
		{TrustedProxies: trusted},
		{TrustedProxies: trusted, Header: "Forwarded"},
		{TrustedProxies: trusted, Header: "Forwarded", Depth: 2},
		{AnyPeer: true, Depth: 1},
		{AnyPeer: true, Header: "Forwarded", Depth: 1},
		{TrustedProxies: trusted, Header: "Forwarded", IPv4Prefix: 24, IPv6Prefix: 64},
	}
	rng := rand.New(rand.NewSource(13))
	for ri, ip := range rules {
		clock := testclock.New(testclock.Epoch)
		l := gateLimit(t, "api", model.TokenBucket, "2/s", 0)
		resp := answer.Responder{Headers: answer.DefaultHeaders, Body: answer.BodyJSON}
		laneGate, slowGate := laneGates(t, []*model.Limit{l}, resp, clock)
		spec, err := keyspec.Parse(nil, ip)
		if err != nil {
			t.Fatal(err)
		}
		var seen []Verdict
		lane := NewLane(LaneConfig{Gate: laneGate, Asks: []LaneAsk{{Limit: l, Cost: 1}}, Specs: []*keyspec.Spec{spec}, Prefix: "mw\x00",
			Observe: func(v *Verdict) { seen = append(seen, *v) }})
		for step := 0; step < 200; step++ {
			remote, v := remotes[rng.Intn(len(remotes))], values[rng.Intn(len(values))]
			xff, fwd := v, "for="+v
			if strings.Contains(v, ":") {
				fwd = `for="` + v + `"`
			}
			seen = seen[:0]
			serveBothRequest(t, "rule "+strconv.Itoa(ri)+" step "+strconv.Itoa(step), lane, slowGate, func() *http.Request {
				r := httptest.NewRequest(http.MethodGet, "/", nil)
				r.RemoteAddr = remote
				r.Header.Set("X-Forwarded-For", xff)
				r.Header.Set("Forwarded", strings.ReplaceAll(fwd, ", ", ", for="))
				return r
			}, func(r *http.Request) []model.Ask {
				key, ok := spec.Key(r)
				if key, ok = hostkey.Resolve(keyspec.MissingSkip, key, ok); ok {
					return []model.Ask{{Limit: l, Key: "mw\x00" + key, Cost: 1}}
				}
				return nil
			}, &seen)
			clock.Advance(time.Duration(rng.Int63n(int64(300 * time.Millisecond))))
		}
	}
}

// TestServeLaneNextRounding: the lane's t is tokenBucket's Next rounded
// as Gate.Serve rounds it, also where Next and Reset fall on either side
// of a whole second (1 per 4 s, burst 10, cost 0.55, 1.4 s apart: Reset
// 3000000001 ns, Next 3000000000 ns, t=3).
func TestServeLaneNextRounding(t *testing.T) {
	clock := testclock.New(testclock.Epoch)
	l := gateLimit(t, "api", model.TokenBucket, "1/4s", 10)
	resp := answer.Responder{Headers: answer.DefaultHeaders}
	g, sg := laneGates(t, []*model.Limit{l}, resp, clock)
	spec, err := keyspec.Parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	lane := NewLane(LaneConfig{Gate: g, Asks: []LaneAsk{{Limit: l, Cost: 0.55}}, Specs: []*keyspec.Spec{spec}})
	for step := 0; step < 2; step++ {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		lr, gr := httptest.NewRecorder(), httptest.NewRecorder()
		ServeLane(lane, &countingHandler{}, lr, r)
		key, _ := spec.Key(r)
		sg.Serve(gr, r, []model.Ask{{Limit: l, Key: key, Cost: 0.55}})
		if got, want := lr.Header().Get("Ratelimit"), gr.Header().Get("Ratelimit"); got != want {
			t.Fatalf("request %d: lane RateLimit %q, gate %q", step+1, got, want)
		}
		clock.Advance(1400 * time.Millisecond)
	}
}

// TestServeLaneManyMatchesGate: a lane of two limits in the in-memory
// store, one per client and one global (laneAsks, takeMany, laneMany),
// answers every request exactly as Gate.Serve answers the same asks on
// the general path, for every algorithm of the per-client limit and every
// header set.
func TestServeLaneManyMatchesGate(t *testing.T) {
	algs := []struct {
		alg   model.Algorithm
		rate  string
		burst float64
	}{
		{model.TokenBucket, "3/s", 0},
		{model.FixedWindow, "5/s", 0},
		{model.SlidingWindowCounter, "10/m", 0},
		{model.SlidingWindowLog, "4/s", 0},
		{model.LeakyBucket, "3/s", 4},
	}
	headerSets := []answer.HeaderSet{answer.DefaultHeaders, answer.HeadersIETF, answer.HeadersX, answer.HeadersIETF | answer.HeadersLegacy | answer.HeadersX, answer.HeadersOff}
	remotes := []string{"192.0.2.1:1234", "192.0.2.2:80", "[2001:db8::1]:443", "not an address", ""}
	steps := 200
	if testing.Short() {
		steps = 40
	}
	rng := rand.New(rand.NewSource(12))
	for ai, ac := range algs {
		for hi, hs := range headerSets {
			clock := testclock.New(testclock.Epoch)
			per := gateLimit(t, "per", ac.alg, ac.rate, ac.burst)
			if ac.alg == model.LeakyBucket {
				per.MaxDelay = 1 // rejects what it would delay
				if err := per.Validate(); err != nil {
					t.Fatal(err)
				}
			}
			global := gateLimit(t, "global", model.TokenBucket, "7/s", 5)
			limits := []*model.Limit{per, global}
			resp := answer.Responder{Headers: hs, Body: answer.BodyFormat((ai + hi) % 4)}
			laneGate, slowGate := laneGates(t, limits, resp, clock)
			ipSpec, allSpec := ipAndAllSpecs(t)
			var seen []Verdict
			lane := NewLane(LaneConfig{Gate: laneGate, Asks: []LaneAsk{{Limit: per, Spec: 0, Cost: 1}, {Limit: global, Spec: 1, Cost: 1}},
				Specs: []*keyspec.Spec{ipSpec, allSpec}, Prefix: "mw\x00", Observe: func(v *Verdict) { seen = append(seen, *v) }})
			label := string(ac.alg) + " headers " + strconv.Itoa(int(hs))
			for step := 0; step < steps; step++ {
				remote := remotes[rng.Intn(len(remotes))]
				seen = seen[:0]
				serveBoth(t, label+" step "+strconv.Itoa(step), lane, slowGate, context.Background(), remote, func(r *http.Request) []model.Ask {
					all := model.Ask{Limit: global, Key: "mw\x00all", Cost: 1}
					key, ok := ipSpec.Key(r)
					if key, ok = hostkey.Resolve(keyspec.MissingSkip, key, ok); ok {
						return []model.Ask{{Limit: per, Key: "mw\x00" + key, Cost: 1}, all}
					}
					return []model.Ask{all}
				}, &seen)
				clock.Advance(time.Duration(rng.Int63n(int64(300 * time.Millisecond))))
			}
		}
	}
}

// TestXRateLimitResetRoundsUp: X-RateLimit-Reset names the first whole
// second at which the limit is whole again, ceil(now + reset), not
// floor(now) + ceil(reset), which names a second at which the client is
// still refused: at 0.9 s past a second, a bucket of 1 per second just
// emptied is whole 1.9 s later, in the second after next. Every path
// that writes the header, the gate's (Responder.SetHeaders and Reject)
// and the lane's fused ones (serveLaneTB, laneReject, laneSetIETFX),
// answers the same.
func TestXRateLimitResetRoundsUp(t *testing.T) {
	const frac = 900 * time.Millisecond
	for _, alg := range []model.Algorithm{model.TokenBucket, model.FixedWindow} {
		for _, hs := range []answer.HeaderSet{answer.DefaultHeaders, answer.HeadersX} {
			for _, via := range []string{"gate", "lane", "lane of two limits"} {
				label := string(alg) + " headers " + strconv.Itoa(int(hs)) + " " + via
				clock := testclock.New(testclock.Epoch + int64(frac))
				l := gateLimit(t, "api", alg, "1/s", 0)
				limits := []*model.Limit{l}
				if via == "lane of two limits" {
					limits = append(limits, gateLimit(t, "global", model.TokenBucket, "1000/s", 0))
				}
				store, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				g, err := NewGate(GateConfig{Limits: limits, Store: store, Responder: answer.Responder{Headers: hs}, Clock: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				spec, err := keyspec.Parse(nil, nil)
				if err != nil {
					t.Fatal(err)
				}
				var lane *Lane
				if via != "gate" {
					asks := []LaneAsk{{Limit: l, Cost: 1}}
					if len(limits) == 2 {
						asks = append(asks, LaneAsk{Limit: limits[1], Cost: 1})
					}
					lane = NewLane(LaneConfig{Gate: g, Asks: asks, Specs: []*keyspec.Spec{spec}})
				}
				// The window of 1 per second began at the whole second:
				// it ends 0.1 s from now.
				whole := testclock.Epoch + int64(frac) + int64(time.Second)
				if alg == model.FixedWindow {
					whole = testclock.Epoch + int64(time.Second)
				}
				want := strconv.FormatInt((whole+answer.NanosPerSecond-1)/answer.NanosPerSecond, 10)
				for i, status := range []int{http.StatusOK, http.StatusTooManyRequests} {
					r := httptest.NewRequest(http.MethodGet, "/", nil)
					rec := httptest.NewRecorder()
					if lane != nil {
						ServeLane(lane, &countingHandler{}, rec, r)
					} else {
						key, _ := spec.Key(r)
						g.Serve(rec, r, []model.Ask{{Limit: l, Key: key, Cost: 1}})
					}
					if rec.Code != status {
						t.Fatalf("%s: request %d answered %d, want %d", label, i+1, rec.Code, status)
					}
					if got := rec.Header().Get("X-RateLimit-Reset"); got != want {
						t.Errorf("%s: request %d: X-RateLimit-Reset %s, want %s (the limit is whole at %d.%09d)",
							label, i+1, got, want, whole/answer.NanosPerSecond, whole%answer.NanosPerSecond)
					}
				}
			}
		}
	}
}

// ipAndAllSpecs returns the key specs of the lane tests: the client's
// address, and one key for every request.
func ipAndAllSpecs(t *testing.T) (ip, all *keyspec.Spec) {
	t.Helper()
	ip, err := keyspec.Parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if all, err = keyspec.Parse([]string{"const:all"}, nil); err != nil {
		t.Fatal(err)
	}
	return ip, all
}

// laneGates returns the two gates of a differential test, deciding limits
// on clock's time with resp: lane, on a memory store, whose lane takes its
// fused paths, and slow, on a memory store hidden from it (hiddenStore),
// whose requests take the general path. Both read clock, so lane is told
// it may take the decision's instant for the headers, as on the system
// clock (memClock).
func laneGates(t *testing.T, limits []*model.Limit, resp answer.Responder, clock *testclock.Clock) (lane, slow *Gate) {
	t.Helper()
	laneStore, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if lane, err = NewGate(GateConfig{Limits: limits, Store: laneStore, Responder: resp, Clock: clock.Now}); err != nil {
		t.Fatal(err)
	}
	lane.memClock = true
	slowStore, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if slow, err = NewGate(GateConfig{Limits: limits, Store: &hiddenStore{slowStore}, Responder: resp, Clock: clock.Now}); err != nil {
		t.Fatal(err)
	}
	return lane, slow
}
