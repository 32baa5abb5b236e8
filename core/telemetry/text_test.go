package telemetry

import (
	"math"
	"strings"
	"testing"
)

func write(t *testing.T, e *Exposition) string {
	t.Helper()
	var b strings.Builder
	n, err := e.WriteTo(&b)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if int(n) != b.Len() {
		t.Errorf("WriteTo returned %d, wrote %d bytes", n, b.Len())
	}
	return b.String()
}

// TestExpositionFormat: HELP and TYPE lines once per family, families by
// name and series by labels whatever the order of the calls, values as the
// format spells them.
func TestExpositionFormat(t *testing.T) {
	var e Exposition
	zone := func(z string) Label { return Label{Name: "zone", Value: z} }
	e.Gauge("b_gauge", "A gauge.", 2.5, zone("y"))
	e.Counter("a_total", "Some things.", 3, zone("b"), Label{Name: "outcome", Value: "allowed"})
	e.Counter("a_total", "Some things.", 1234567, zone("a"), Label{Name: "outcome", Value: "allowed"})
	e.Gauge("b_gauge", "A gauge.", math.Inf(-1), zone("x"))
	e.Gauge("c", "", math.NaN())
	got := write(t, &e)
	want := `# HELP a_total Some things.
# TYPE a_total counter
a_total{zone="a",outcome="allowed"} 1234567
a_total{zone="b",outcome="allowed"} 3
# HELP b_gauge A gauge.
# TYPE b_gauge gauge
b_gauge{zone="x"} -Inf
b_gauge{zone="y"} 2.5
# TYPE c gauge
c NaN
`
	if got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestExpositionEscapes: a label value escapes \, " and line feed; a help
// text \ and line feed, and keeps its quotes.
func TestExpositionEscapes(t *testing.T) {
	var e Exposition
	e.Counter("x_total", "Say \"hi\" \\ then\nbye.", 1, Label{Name: "zone", Value: "a\\b\"c\nd"})
	want := `# HELP x_total Say "hi" \\ then\nbye.
# TYPE x_total counter
x_total{zone="a\\b\"c\nd"} 1
`
	if got := write(t, &e); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestExpositionHistogram: cumulative buckets with their le, +Inf last and
// equal to _count, then _sum and _count, the labels before le.
func TestExpositionHistogram(t *testing.T) {
	var e Exposition
	e.Histogram("d_seconds", "Durations.", []float64{.00005, .5, 1}, []uint64{2, 0, 3, 1}, 2.75, Label{Name: "zone", Value: "z"})
	e.Histogram("e_seconds", "Bare.", []float64{1}, []uint64{0, 0}, 0)
	want := `# HELP d_seconds Durations.
# TYPE d_seconds histogram
d_seconds_bucket{zone="z",le="5e-05"} 2
d_seconds_bucket{zone="z",le="0.5"} 2
d_seconds_bucket{zone="z",le="1"} 5
d_seconds_bucket{zone="z",le="+Inf"} 6
d_seconds_sum{zone="z"} 2.75
d_seconds_count{zone="z"} 6
# HELP e_seconds Bare.
# TYPE e_seconds histogram
e_seconds_bucket{le="1"} 0
e_seconds_bucket{le="+Inf"} 0
e_seconds_sum 0
e_seconds_count 0
`
	if got := write(t, &e); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

// TestExpositionDecisionBuckets: the families of package telemetry write
// as they are named, DecisionBuckets with the +Inf bucket after them.
func TestExpositionDecisionBuckets(t *testing.T) {
	var e Exposition
	b := DecisionBuckets()
	e.Histogram(DecisionSeconds, DecisionSecondsHelp, b, make([]uint64, len(b)+1), 0)
	got := write(t, &e)
	if n := strings.Count(got, DecisionSeconds+"_bucket{"); n != len(b)+1 {
		t.Errorf("%d buckets, want %d:\n%s", n, len(b)+1, got)
	}
	if !strings.Contains(got, `_bucket{le="1"} 0`+"\n"+DecisionSeconds+`_bucket{le="+Inf"} 0`) {
		t.Errorf("no +Inf bucket after the last bound:\n%s", got)
	}
}

// TestExpositionMisuse: what the format cannot say is refused by WriteTo,
// which then writes nothing.
func TestExpositionMisuse(t *testing.T) {
	for name, add := range map[string]func(*Exposition){
		"metric name":    func(e *Exposition) { e.Counter("a-b", "", 1) },
		"label name":     func(e *Exposition) { e.Counter("a", "", 1, Label{Name: "0x", Value: ""}) },
		"reserved label": func(e *Exposition) { e.Counter("a", "", 1, Label{Name: "__name__", Value: ""}) },
		"repeated label": func(e *Exposition) { e.Counter("a", "", 1, Label{Name: "z", Value: "1"}, Label{Name: "z", Value: "2"}) },
		"two types":      func(e *Exposition) { e.Counter("a", "", 1); e.Gauge("a", "", 1) },
		"series twice":   func(e *Exposition) { e.Gauge("a", "", 1, Label{Name: "z"}); e.Gauge("a", "", 2, Label{Name: "z"}) },
		"histogram le": func(e *Exposition) {
			e.Histogram("h", "", []float64{1}, []uint64{0, 0}, 0, Label{Name: "le", Value: "1"})
		},
		"histogram count": func(e *Exposition) { e.Histogram("h", "", []float64{1}, []uint64{0}, 0) },
		"histogram order": func(e *Exposition) { e.Histogram("h", "", []float64{2, 1}, []uint64{0, 0, 0}, 0) },
	} {
		var e Exposition
		e.Gauge("ok", "", 1)
		add(&e)
		var b strings.Builder
		if n, err := e.WriteTo(&b); err == nil || n != 0 || b.Len() != 0 {
			t.Errorf("%s: WriteTo wrote %q, error %v; want nothing and an error", name, b.String(), err)
		}
	}
}
