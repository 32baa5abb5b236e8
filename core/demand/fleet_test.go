package demand

import (
	"hash/crc64"
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

// TestFleetKey: the first 64 bits of SHA-256, the same in every process:
// those of "123456789"'s.
func TestFleetKey(t *testing.T) {
	if h := FleetKey("123456789"); h != 0x15e2b0d3c33891eb {
		t.Errorf("FleetKey(\"123456789\") = %x", h)
	}
}

// forgeCRC returns prefix followed by n characters from '@' to 'O' whose
// CRC-64 (ECMA) is target, or fails t: a CRC is affine in its message's
// bits, so the low 4 bits of each character solve 64 linear equations
// over GF(2).
func forgeCRC(t *testing.T, prefix string, n int, target uint64) string {
	t.Helper()
	table := crc64.MakeTable(crc64.ECMA)
	msg := []byte(prefix + strings.Repeat("@", n))
	base := crc64.Checksum(msg, table)
	// A row is the CRC's change by flipping the bits vars (4 a
	// character), reduced by Gaussian elimination on the change's bits.
	type row struct {
		delta uint64
		vars  []bool
	}
	var pivots [64]*row
	for v := 0; v < 4*n; v++ {
		i, bit := len(prefix)+v/4, byte(1)<<uint(v%4)
		msg[i] ^= bit
		r := &row{delta: crc64.Checksum(msg, table) ^ base, vars: make([]bool, 4*n)}
		msg[i] ^= bit
		r.vars[v] = true
		for b := 63; b >= 0 && r.delta != 0; b-- {
			if r.delta>>uint(b)&1 == 0 {
				continue
			}
			if pivots[b] == nil {
				pivots[b] = r
				break
			}
			r.delta ^= pivots[b].delta
			for j := range r.vars {
				r.vars[j] = r.vars[j] != pivots[b].vars[j]
			}
		}
	}
	want := base ^ target
	flip := make([]bool, 4*n)
	for b := 63; b >= 0; b-- {
		if want>>uint(b)&1 == 0 {
			continue
		}
		if pivots[b] == nil {
			t.Fatalf("forgeCRC: %d characters do not reach bit %d", n, b)
		}
		want ^= pivots[b].delta
		for j := range flip {
			flip[j] = flip[j] != pivots[b].vars[j]
		}
	}
	for v, f := range flip {
		if f {
			msg[len(prefix)+v/4] ^= byte(1) << uint(v%4)
		}
	}
	return string(msg)
}

// TestFleetKeyForgery: a client that chooses its key's value (a header)
// cannot make its demand count under another key's. Under a CRC-64, a
// key of 24 letters of its choosing took any key's hash, so a fleet
// summed the forger's 100 into the victim's key-period; each now keeps
// its own.
func TestFleetKeyForgery(t *testing.T) {
	victim := "203.0.113.7"
	forged := forgeCRC(t, "mallory-", 24, crc64.Checksum([]byte(victim), crc64.MakeTable(crc64.ECMA)))
	if crc64.Checksum([]byte(forged), crc64.MakeTable(crc64.ECMA)) != crc64.Checksum([]byte(victim), crc64.MakeTable(crc64.ECMA)) {
		t.Fatal("the forgery does not meet the victim's CRC-64")
	}
	r := NewFleetRecorder(minute, 0, 0, func() {})
	r.Add(0, victim, 1)
	r.Add(0, forged, 100)
	r.Snapshot(2 * minute)
	got := map[uint64]float64{}
	for _, p := range r.Drain() {
		got[p.Key] += p.Demand
	}
	if len(got) != 2 || got[FleetKey(victim)] != 1 || got[FleetKey(forged)] != 100 {
		t.Errorf("partials %v, want the victim's 1 and the forger's 100 apart", got)
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
