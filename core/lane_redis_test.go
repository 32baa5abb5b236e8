package core

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// redisLanePair returns two lanes of cfg's one limit on store, each on a
// gate of its own (with its own breaker, failing by policy after timeout,
// the clock clock, nil for the system clock), that record what they
// observe in seen: the first takes serveLaneRedis' path, the second, the
// same lane with that path off, the general one.
func redisLanePair(t *testing.T, store *redisstore.Store, l *model.Limit, policy StoreErrorPolicy, timeout time.Duration, clock model.Clock, cfg LaneConfig, seen *[2][]Verdict) [2]*Lane {
	t.Helper()
	var lanes [2]*Lane
	for i := range lanes {
		g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: store, Responder: answer.Responder{Headers: answer.DefaultHeaders, Body: answer.BodyJSON},
			OnStoreError: policy, Timeout: timeout, Breaker: &Breaker{Failures: 3, Backoff: time.Hour}, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		lanes[i] = observedLane(cfg, g, seen, i)
	}
	if !lanes[0].rd {
		t.Fatal("the lane does not take serveLaneRedis' path")
	}
	lanes[1].rd = false
	return lanes
}

// observedLane is the lane of cfg on g, which records in seen[k] what it
// observes. (Yaegi v0.16.1 cannot take the address of seen[k].)
func observedLane(cfg LaneConfig, g *Gate, seen *[2][]Verdict, k int) *Lane {
	cfg.Gate = g
	cfg.Observe = func(v *Verdict) { seen[k] = append(seen[k], *v) }
	return NewLane(cfg)
}

// simplyAllowed reports whether v is a verdict that a lane with
// LaneConfig.Down may leave unobserved while *Down is 0.
func simplyAllowed(v *Verdict) bool {
	return v.Outcome == OutcomeAllowed && v.Delay == 0 && v.Err == nil
}

// localAddr matches the local address in a connection's error.
var localAddr = regexp.MustCompile(`127\.0\.0\.1:[0-9]+->`)

// observedKept returns vs but for the simply allowed verdicts when
// unobserved is set.
func observedKept(vs []Verdict, unobserved bool) []Verdict {
	var out []Verdict
	for i := range vs {
		if !unobserved || !simplyAllowed(&vs[i]) {
			out = append(out, vs[i])
		}
	}
	return out
}

// observedAlike reports whether the verdicts a and b observed are the
// same, but for the simply allowed ones when unobserved may leave them
// out; errors are compared by their text but for the local addresses of
// connections (each lane's connection is its own).
func observedAlike(a, b []Verdict, unobserved bool) bool {
	a, b = observedKept(a, unobserved), observedKept(b, unobserved)
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		x, y := a[i], b[i]
		if (x.Err == nil) != (y.Err == nil) || x.Err != nil && localAddr.ReplaceAllString(x.Err.Error(), "") != localAddr.ReplaceAllString(y.Err.Error(), "") {
			return false
		}
		x.Err = nil // one field per statement: Yaegi panics on a nil in a tuple assignment to fields
		y.Err = nil
		if !reflect.DeepEqual(x, y) {
			return false
		}
	}
	return true
}

// observerVariant sets cfg's observer for variant: 0, the default; 1,
// every verdict (Watch); 2 and 3, Watch with Down, *down 0 and 1; 4, as 2
// with a shared bucket for requests without a key. Other variants are
// left as 0.
func observerVariant(cfg *LaneConfig, variant int, down *int32) {
	switch variant {
	case 1:
		cfg.Watch = true
	case 2, 3:
		cfg.Watch, cfg.Down = true, down
		*down = int32(variant - 2)
	case 4:
		cfg.Asks[0].Missing = keyspec.MissingShared
		cfg.Watch, cfg.Down = true, down
	}
}

// serveLanes sends a request from remote to each of lanes, the first on a
// written-out path and the second on the general one, and fails t, naming
// label, unless they answer alike (status, headers, body, whether the
// request went on) and observe alike in seen (but for the simply allowed
// verdicts when unobserved), which it then empties. It returns the status.
func serveLanes(t *testing.T, lanes [2]*Lane, seen *[2][]Verdict, remote, label string, unobserved bool) int {
	t.Helper()
	var recs [2]*httptest.ResponseRecorder
	var nexts [2]countingHandler
	for i := range lanes {
		recs[i] = httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remote
		ServeLane(lanes[i], &nexts[i], recs[i], r)
	}
	if recs[0].Code != recs[1].Code || !reflect.DeepEqual(recs[0].Header(), recs[1].Header()) ||
		recs[0].Body.String() != recs[1].Body.String() || nexts[0].n != nexts[1].n {
		t.Fatalf("%s, client %q: lane answered %d %v %q (next %d), general path %d %v %q (next %d)", label, remote,
			recs[0].Code, recs[0].Header(), recs[0].Body, nexts[0].n, recs[1].Code, recs[1].Header(), recs[1].Body, nexts[1].n)
	}
	if !observedAlike(seen[0], seen[1], unobserved) {
		t.Fatalf("%s, client %q: lane observed %+v, general path %+v", label, remote, seen[0], seen[1])
	}
	seen[0], seen[1] = seen[0][:0], seen[1][:0]
	return recs[0].Code
}

// TestServeLaneRedisMatchesGeneral: a lane that takes serveLaneRedis'
// path answers every request as the same lane does on the general path
// (serveLaneAny, Gate.Serve) when Redis replies the
// same to both: status, headers, body, whether the request went on, and
// the verdicts observed (but for those simply allowed, which LaneConfig.Down
// lets it leave out), for admissions with a whole or fractional number
// remaining or a delay, rejections, unusual and malformed replies, and a
// server that does not answer, failing open and closed, through the
// breaker's opening; for peers with and without a key, keys too long to
// send as they are, and every observer.
func TestServeLaneRedisMatchesGeneral(t *testing.T) {
	replies := []string{
		"1 4 250000000 0 0 250000000",
		"1 0 1000000000 0 0 1000000000",
		"1 4.499999999 250000001 0 0 125000000",
		"1 9007199254740993 1 0 0 1", // more digits than redisstore.DecodeDecisions reads
		"1 1e3 1 0 0 1",
		"1 1234567890123456 1 0 0 1",
		"1 4 1234567890123456 0 0 1",
		"1 4 250000000 7 0 250000000", // a retry, ignored in an admission
		"1 4 250000000 0 1000 250000000",
		"0 0 250000000 250000000 0 250000000",
		"0 0 250000000 0 0 250000000",
		"0 -1 3 -1 0 3",
		"0 3.75 250000000 62500000 0 62500000", // a rejection with a fraction remaining
		"0 0 2000000000 999999999999999 0 1",   // a retry of 15 digits
		"0 0 2000000000 9223372036854775807 0 1",
		"0 0 1 1 7 1", // a delay, which a rejection never has
		"01 4 250000000 0 0 250000000",
		"1 4 250000000 0 0 ",
		"1 4 250000000 0 0",
		"1 4 250000000 0 0 1 2",
		"1 4 250000000 0 0 1,1 4 250000000 0 0 1",
		"1 4 25x 0 0 1",
		"1  4 1 0 0 1",
		"1 NaN 1 0 0 1",
		"1 -4 1 0 0 1",
		"1 4 -1 0 0 1",
		"1 4 1.5 0 0 1",
		"2 4 1 0 0 1",
		"",
		"silent",
	}
	remotes := []string{"192.0.2.1:1234", "[2001:db8::1]:443", "not an address", ""}
	for _, reply := range replies {
		f := startFakeRedis(t, reply, reply == "silent")
		client := resptest.Client(t, f.addr, 1)
		store := newTestRedisStore(t, client, false)
		l := coretest.Limit(t, "lane-redis", model.TokenBucket, "4/s", 5, 0)
		spec, err := keyspec.Parse(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		for variant := 0; variant < 6; variant++ {
			var down int32
			cfg := LaneConfig{Asks: []LaneAsk{{Limit: l, Cost: 1}}, Specs: []*keyspec.Spec{spec}, Prefix: "mw\x00"}
			observerVariant(&cfg, variant, &down)
			if variant == 5 {
				cfg.Prefix = strings.Repeat("p", keyspec.MaxKeyLength)
			}
			policy := StoreErrorPolicy(variant % 2)
			clock := testclock.New(testclock.Epoch)
			var seen [2][]Verdict
			// A server that answers is given all the time a loaded
			// machine may take, under Yaegi too; a silent one, 50 ms.
			timeout := 5 * time.Second
			if reply == "silent" {
				timeout = 50 * time.Millisecond
			}
			lanes := redisLanePair(t, store, l, policy, timeout, clock.Now, cfg, &seen)
			label := strconv.Quote(reply) + " variant " + strconv.Itoa(variant)
			for step := 0; step < 5; step++ {
				for _, remote := range remotes {
					serveLanes(t, lanes, &seen, remote, label+", step "+strconv.Itoa(step), cfg.Down != nil && atomic.LoadInt32(&down) == 0)
					clock.Advance(300 * time.Millisecond)
				}
			}
		}
	}
}

// TestServeLaneRedisSystemClock: on the system clock, the lane's headers
// are the general path's (X-RateLimit-Reset read on the gate's clock
// after the decision: a request is tried again if a second began
// between the two).
func TestServeLaneRedisSystemClock(t *testing.T) {
	f := startFakeRedis(t, "1 4 250000000 0 0 250000000", false)
	store := newTestRedisStore(t, resptest.Client(t, f.addr, 1), false)
	l := coretest.Limit(t, "lane-redis-clock", model.TokenBucket, "4/s", 5, 0)
	spec, err := keyspec.Parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen [2][]Verdict
	lanes := redisLanePair(t, store, l, FailOpen, 5*time.Second, nil, LaneConfig{Asks: []LaneAsk{{Limit: l, Cost: 1}}, Specs: []*keyspec.Spec{spec}}, &seen)
	if lanes[0].sys == nil {
		t.Fatal("the lane does not read the system clock inline")
	}
	for try := 0; ; try++ {
		var recs [2]*httptest.ResponseRecorder
		for i := range lanes {
			recs[i] = httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, "/", nil)
			ServeLane(lanes[i], &countingHandler{}, recs[i], r)
		}
		if reflect.DeepEqual(recs[0].Header(), recs[1].Header()) {
			break
		}
		if try == 2 {
			t.Fatalf("lane headers %v, general path %v", recs[0].Header(), recs[1].Header())
		}
	}
}

// TestServeLaneRedisScripts: on a real server, serveLaneRedis decides
// as the store's Take does, loads the script again after SCRIPT FLUSH
// through the store's Client, as laneRedisSlow does, and leaves what it
// cannot send at once to the general path: a direct client closed or
// gone.
func TestServeLaneRedisScripts(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 2)
	cs, direct, s := directStore(t, client)
	l := coretest.Limit(t, "lane-redis-"+coretest.Nonce, model.TokenBucket, "2/h", 3, 0)
	spec, err := keyspec.Parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var seen [2][]Verdict
	lanes := redisLanePair(t, s, l, FailClosed, 5*time.Second, nil, LaneConfig{Asks: []LaneAsk{{Limit: l, Cost: 1}}, Specs: []*keyspec.Spec{spec}, Watch: true}, &seen)
	serve := func(what string, code int, remaining string, evals, loads int32) {
		t.Helper()
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		ServeLane(lanes[0], &countingHandler{}, w, r)
		if w.Code != code || w.Header().Get("X-Ratelimit-Remaining") != remaining {
			t.Fatalf("%s: answered %d %v, want %d and %s remaining", what, w.Code, w.Header(), code, remaining)
		}
		if len(seen[0]) != 1 || seen[0][0].Err != nil {
			t.Fatalf("%s: observed %+v", what, seen[0])
		}
		seen[0] = seen[0][:0]
		if e, l := atomic.LoadInt32(&cs.evals), atomic.LoadInt32(&cs.loads); e != evals || l != loads {
			t.Fatalf("%s: %d EvalSha and %d ScriptLoad through Client, want %d and %d", what, e, l, evals, loads)
		}
	}
	serve("first", 200, "2", 1, 1) // the first loaded the script
	if _, err := client.Do(context.Background(), "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	serve("after SCRIPT FLUSH", 200, "1", 2, 2)
	serve("direct", 200, "0", 2, 2)
	closed := resptest.Client(t, srv.Addr, 1)
	closed.Close()
	direct.Set(closed)
	serve("direct client closed", 429, "0", 3, 2)
	direct.Set(nil)
	serve("no direct client", 429, "0", 4, 2)
}

// TestServeLaneLeaseMatchesGeneral: a lane that admits from leases by
// serveLaneLease answers every request as the same lane does on the
// general path (serveLaneAny, Gate.Serve), each lane on a store of its
// own against one real Redis, their keys apart, on one clock that the
// stores, their leases and the gates share: status, headers, body,
// whether the request went on, and the verdicts observed (but for those
// simply allowed, which LaneConfig.Down lets it leave out), for peers with
// and without a key, whole and fractional costs and every observer, while
// leases are taken, spent, refused and the key runs short, and once the
// breaker is open.
func TestServeLaneLeaseMatchesGeneral(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	spec, err := keyspec.Parse(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	remotes := []string{"192.0.2.1:1234", "[2001:db8::1]:443", "not an address", ""}
	for _, cost := range []float64{1, 1.5} {
		for variant := 0; variant < 6; variant++ {
			l := coretest.Limit(t, "lane-lease", model.TokenBucket, "4/s", 6, 0)
			l.Lease = 3
			if err := l.Validate(); err != nil {
				t.Fatal(err)
			}
			var down int32
			cfg := LaneConfig{Asks: []LaneAsk{{Limit: l, Cost: cost}}, Specs: []*keyspec.Spec{spec}}
			observerVariant(&cfg, variant, &down)
			// In variant 5 the breakers open at step 5, when each key's
			// lease, taken at step 4, is not spent yet: it is then left
			// alone, as Gate.Serve asks no store.
			failures := 3
			if variant == 5 {
				failures = 1
			}
			clock := testclock.New(testclock.Epoch)
			var seen [2][]Verdict
			var lanes [2]*Lane
			for i := range lanes {
				store, err := redisstore.New(redisstore.Config{Client: resptest.Client(t, srv.Addr, 1), Clock: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: store, Responder: answer.Responder{Headers: answer.DefaultHeaders, Body: answer.BodyJSON},
					Timeout: 5 * time.Second, Breaker: &Breaker{Failures: failures, Backoff: time.Hour}, Clock: clock.Now})
				if err != nil {
					t.Fatal(err)
				}
				cfg.Prefix = coretest.Nonce + model.FormatFloat(cost) + "/" + strconv.Itoa(variant) + "/" + strconv.Itoa(i) + "\x00"
				lanes[i] = observedLane(cfg, g, &seen, i)
			}
			if !lanes[0].leased {
				t.Fatal("the lane does not take serveLaneLease's path")
			}
			lanes[1].leased = false
			label := "cost " + model.FormatFloat(cost) + " variant " + strconv.Itoa(variant)
			admitted := 0
			for step := 0; step < 10; step++ {
				if variant == 5 && step == 5 {
					for _, lane := range lanes {
						lane.gate.cfg.Breaker.Failure(clock.Now(), 0)
					}
				}
				for _, remote := range remotes {
					if serveLanes(t, lanes, &seen, remote, label+", step "+strconv.Itoa(step), cfg.Down != nil && atomic.LoadInt32(&down) == 0) == http.StatusOK {
						admitted++
					}
					clock.Advance(20 * time.Millisecond)
				}
			}
			if admitted == 0 {
				t.Fatalf("%s: no request admitted", label)
			}
		}
	}
}
