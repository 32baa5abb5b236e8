package demand

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
)

// TestFleetRecorderPartials: two instances of a fleet each see part of
// the keys' asks; the sums of their partials by period and key are the
// keys' whole demand per period, and nothing is folded locally.
func TestFleetRecorderPartials(t *testing.T) {
	period := int64(time.Minute)
	calls := 0
	a := NewFleetRecorder(period, 0, 0, func() { calls++ })
	b := NewFleetRecorder(period, 0, 0, func() { calls++ })
	want := map[Partial]float64{} // Demand zero: the key of the map
	for i := 0; i < 600; i++ {
		now := int64(i) * int64(time.Second) / 2 // 5 minutes
		key := "k" + strconv.Itoa(i%7)
		cost := float64(1 + i%3)
		r := a
		if i%2 == 1 {
			r = b
		}
		r.Add(now, key, cost)
		want[Partial{Period: now / period, Key: FleetKey(key)}] += cost
	}
	end := 10 * period // every period over
	a.Snapshot(end)
	b.Snapshot(end)
	got := map[Partial]float64{}
	for _, r := range []*Recorder{a, b} {
		for _, p := range r.Drain() {
			got[Partial{Period: p.Period, Key: p.Key}] += p.Demand
		}
		if s := r.Snapshot(end); s.Periods.Count() != 0 || s.Keys.Count() != 0 {
			t.Errorf("a fleet recorder folded locally: %d key-periods, %d keys", s.Periods.Count(), s.Keys.Count())
		}
		if parts := r.Drain(); len(parts) != 0 {
			t.Errorf("a second Drain returned %d partials", len(parts))
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d key-periods, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("period %d key %x: %v, want %v", k.Period, k.Key, got[k], v)
		}
	}
	if calls == 0 {
		t.Error("due never called")
	}
}

// TestFleetRecorderBound: partials beyond 4 × maxKeys wait for no Drain;
// they are dropped and counted.
func TestFleetRecorderBound(t *testing.T) {
	period := int64(time.Second)
	r := NewFleetRecorder(period, 16, 0, func() {})
	for i := 0; i < 100; i++ {
		r.Add(int64(i)*period, "k"+strconv.Itoa(i), 1) // each key evicts another, its period folded
	}
	r.Snapshot(1000 * period)
	if n, d := len(r.Drain()), r.Dropped(); n != 64 || d != 100-64 {
		t.Errorf("%d partials kept, %d dropped; want 64 and 36", n, d)
	}
}

// TestFleetKey: CRC-64 (ECMA), the same in every process: the check
// value of "123456789".
func TestFleetKey(t *testing.T) {
	if h := FleetKey("123456789"); h != 0x995dc9bbdf1939fa {
		t.Errorf("FleetKey(\"123456789\") = %x", h)
	}
}

func TestCheckScope(t *testing.T) {
	for _, tc := range []struct {
		scope           string
		onRedis, record bool
		reason          string
	}{
		{"", false, true, ""},
		{"instance", false, false, ""},
		{"fleet", true, true, ""},
		{"fleet", false, true, "needs a Redis store"},
		{"fleet", true, false, "needs the zone's demand recorded"},
		{"cluster", true, true, "want instance or fleet"},
	} {
		err := CheckScope(tc.scope, tc.onRedis, tc.record)
		fe := model.FieldOf(err)
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%+v: %v", tc, err)
		case tc.reason != "" && (fe == nil || fe.Field != "demand_scope" || !strings.Contains(fe.Reason, tc.reason)):
			t.Errorf("%+v: %v, want a FieldError saying %q", tc, err, tc.reason)
		}
	}
}
