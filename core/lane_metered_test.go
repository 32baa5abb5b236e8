package core

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/testclock"
)

// metered is what a LaneConfig.Meter received.
type metered struct {
	v     Verdict
	limit *model.Limit
}

// TestServeLaneMeteredMatchesServeLane: ServeLaneMetered answers every
// request as ServeLane does (status, headers, body, whether it went on),
// reports to the meter the verdict of every request that a limit applies
// to, allowed ones included, with the limit whose headers the client saw,
// and none of a request no limit applies to; the observer sees what it
// sees under ServeLane.
func TestServeLaneMeteredMatchesServeLane(t *testing.T) {
	remotes := []string{"192.0.2.1:1234", "192.0.2.2:80", "[2001:db8::1]:443", "not an address"}
	for _, many := range []bool{false, true} {
		clock := testclock.New(testclock.Epoch)
		per := gateLimit(t, "per", model.TokenBucket, "3/s", 2)
		global := gateLimit(t, "global", model.FixedWindow, "7/s", 0)
		limits := []*model.Limit{per}
		if many {
			limits = append(limits, global)
		}
		ipSpec, err := keyspec.Parse(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		allSpec, err := keyspec.Parse([]string{"const:all"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		lanes := make([]*Lane, 2)
		var seen [2][]Verdict
		var meters []metered
		for i := range lanes {
			i := i
			store, err := NewMemoryStore(MemoryConfig{Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			gate, err := NewGate(GateConfig{Limits: limits, Store: store, Responder: answer.Responder{Headers: answer.DefaultHeaders}, Clock: clock.Now})
			if err != nil {
				t.Fatal(err)
			}
			cfg := LaneConfig{Gate: gate, Asks: []LaneAsk{{Limit: per, Spec: 0, Missing: keyspec.MissingSkip, Cost: 1}},
				Specs: []*keyspec.Spec{ipSpec, allSpec}, Prefix: "mw\x00", Observe: func(v *Verdict) { seen[i] = append(seen[i], *v) }}
			if many {
				cfg.Asks = append(cfg.Asks, LaneAsk{Limit: global, Spec: 1, Cost: 1})
			}
			if i == 1 {
				cfg.Meter = func(v *Verdict, limit *model.Limit, elapsed time.Duration) {
					if elapsed < 0 {
						t.Errorf("elapsed %v", elapsed)
					}
					meters = append(meters, metered{*v, limit})
				}
			}
			lanes[i] = NewLane(cfg)
		}
		for step := 0; step < 60; step++ {
			label := "many " + strconv.FormatBool(many) + " step " + strconv.Itoa(step)
			remote := remotes[step%len(remotes)]
			var recs [2]*httptest.ResponseRecorder
			var nexts [2]countingHandler
			seen[0], seen[1], meters = seen[0][:0], seen[1][:0], meters[:0]
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
			if remote == "not an address" && !many {
				if len(meters) != 0 {
					t.Fatalf("%s: a request no limit applies to metered: %+v", label, meters)
				}
				continue
			}
			if len(meters) != 1 {
				t.Fatalf("%s: metered %d verdicts, want 1", label, len(meters))
			}
			m := meters[0]
			if m.limit == nil || m.limit != m.v.Decision.Limit {
				t.Fatalf("%s: metered limit %v, verdict's %v", label, m.limit, m.v.Decision.Limit)
			}
			want := OutcomeAllowed
			if recs[1].Code == http.StatusTooManyRequests {
				want = OutcomeRejected
			}
			if m.v.Outcome != want {
				t.Fatalf("%s: metered outcome %v, answered %d", label, m.v.Outcome, recs[1].Code)
			}
			clock.Advance(100 * time.Millisecond)
		}
	}
}
