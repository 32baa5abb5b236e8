package telemetry

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
)

// ContentType is the media type of the Prometheus text format that
// Exposition writes (version 0.0.4).
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// A Label is a label of a sample: its name and its value.
type Label struct {
	Name, Value string
}

// An Exposition collects the samples of a scrape and writes them in the
// Prometheus text format: one family per name, with its HELP and TYPE
// lines (no HELP line for an empty help), families sorted by name and, within a family, series sorted by
// their labels, so that two scrapes of the same state read alike. Label
// values and help texts are escaped as the format says. A host builds one
// per scrape with one call per series, such as
//
//	var e telemetry.Exposition
//	e.Counter(telemetry.Decisions, telemetry.DecisionsHelp, 3, telemetry.Label{Name: "zone", Value: "api"}, telemetry.Label{Name: "outcome", Value: "allowed"})
//	_, err := e.WriteTo(w)
//
// The zero value is empty and ready to use; an Exposition is not safe for
// concurrent use.
type Exposition struct {
	families map[string]*family
	err      error // the first misuse, reported by WriteTo
}

// family is one metric family of an Exposition.
type family struct {
	name, help, kind string
	series           []series
}

// series is one label set of a family: its labels rendered without the
// braces (the sort key), and its sample lines.
type series struct {
	labels string
	lines  []string
}

// Counter adds the series of counter name with labels and value v.
func (e *Exposition) Counter(name, help string, v float64, labels ...Label) {
	e.add(name, help, "counter", labels, func(ls string) []string {
		return []string{sampleLine(name, ls, v)}
	})
}

// Gauge adds the series of gauge name with labels and value v.
func (e *Exposition) Gauge(name, help string, v float64, labels ...Label) {
	e.add(name, help, "gauge", labels, func(ls string) []string {
		return []string{sampleLine(name, ls, v)}
	})
}

// Histogram adds the series of histogram name with labels: bounds are the
// buckets' upper bounds, increasing, without +Inf; counts, one more than
// bounds, are the observations of each bucket alone (not cumulative), the
// last those above every bound; sum is the observations' sum. It writes
// the cumulative name_bucket lines, le="+Inf" last, then name_sum and
// name_count.
func (e *Exposition) Histogram(name, help string, bounds []float64, counts []uint64, sum float64, labels ...Label) {
	if len(counts) != len(bounds)+1 {
		e.fail(fmt.Errorf("telemetry: histogram %s: %d counts for %d bounds, want one more", name, len(counts), len(bounds)))
		return
	}
	for i := 1; i < len(bounds); i++ {
		if !(bounds[i] > bounds[i-1]) {
			e.fail(fmt.Errorf("telemetry: histogram %s: bounds not increasing", name))
			return
		}
	}
	e.add(name, help, "histogram", labels, func(ls string) []string {
		lines := make([]string, 0, len(counts)+2)
		var total uint64
		for i, c := range counts {
			total += c
			le := "+Inf"
			if i < len(bounds) {
				le = formatValue(bounds[i])
			}
			lines = append(lines, sampleLine(name+"_bucket", joinLabels(ls, `le="`+le+`"`), float64(total)))
		}
		return append(lines, sampleLine(name+"_sum", ls, sum), sampleLine(name+"_count", ls, float64(total)))
	})
}

// add adds to family name, of kind, the series of labels whose lines
// lines makes from the rendered labels.
func (e *Exposition) add(name, help, kind string, labels []Label, lines func(string) []string) {
	if !validName(name, true) {
		e.fail(fmt.Errorf("telemetry: %q: not a metric name", name))
		return
	}
	ls, err := renderLabels(labels, kind == "histogram")
	if err != nil {
		e.fail(fmt.Errorf("telemetry: %s: %w", name, err))
		return
	}
	if e.families == nil {
		e.families = map[string]*family{}
	}
	f := e.families[name]
	if f == nil {
		f = &family{name: name, help: help, kind: kind}
		e.families[name] = f
	} else if f.kind != kind {
		e.fail(fmt.Errorf("telemetry: %s: added as a %s and a %s", name, f.kind, kind))
		return
	}
	for _, s := range f.series {
		if s.labels == ls {
			e.fail(fmt.Errorf("telemetry: %s{%s}: added twice", name, ls))
			return
		}
	}
	f.series = append(f.series, series{labels: ls, lines: lines(ls)})
}

func (e *Exposition) fail(err error) {
	if e.err == nil {
		e.err = err
	}
}

// WriteTo writes the families in the text format to w. It writes nothing
// and returns the error when a call before it was a misuse (an invalid
// metric or label name, a name added as two types, a label set added
// twice, a histogram's counts not matching its bounds).
func (e *Exposition) WriteTo(w io.Writer) (int64, error) {
	if e.err != nil {
		return 0, e.err
	}
	names := make([]string, 0, len(e.families))
	for name := range e.families {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	for _, name := range names {
		f := e.families[name]
		sort.SliceStable(f.series, func(i, j int) bool { return f.series[i].labels < f.series[j].labels })
		if f.help != "" {
			b.WriteString("# HELP " + name + " " + escapeHelp(f.help) + "\n")
		}
		b.WriteString("# TYPE " + name + " " + f.kind + "\n")
		for _, s := range f.series {
			for _, line := range s.lines {
				b.WriteString(line)
			}
		}
	}
	n, err := io.WriteString(w, b.String())
	return int64(n), err
}

// sampleLine is one sample line of name with the rendered labels ls.
func sampleLine(name, ls string, v float64) string {
	if ls != "" {
		name += "{" + ls + "}"
	}
	return name + " " + formatValue(v) + "\n"
}

// joinLabels joins two rendered label lists.
func joinLabels(a, b string) string {
	if a == "" {
		return b
	}
	return a + "," + b
}

// renderLabels renders labels as the text between a sample's braces,
// name="value" pairs in the order given. A histogram's own label le is
// refused in a histogram's labels, as are invalid and repeated names.
func renderLabels(labels []Label, histogram bool) (string, error) {
	parts := make([]string, 0, len(labels))
	seen := map[string]bool{}
	for _, l := range labels {
		switch {
		case !validName(l.Name, false) || strings.HasPrefix(l.Name, "__"):
			return "", fmt.Errorf("label %q: not a label name", l.Name)
		case histogram && l.Name == "le":
			return "", errors.New(`label "le": a histogram's own`)
		case seen[l.Name]:
			return "", fmt.Errorf("label %q: given twice", l.Name)
		}
		seen[l.Name] = true
		parts = append(parts, l.Name+`="`+escapeLabel(l.Value)+`"`)
	}
	return strings.Join(parts, ","), nil
}

// validName reports whether s is a metric name ([a-zA-Z_:][a-zA-Z0-9_:]*)
// or, without colons, a label name.
func validName(s string, colons bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == ':' && colons || i > 0 && c >= '0' && c <= '9'
		if !ok {
			return false
		}
	}
	return true
}

// Escapes of the text format: a help text escapes backslash and line
// feed, a label value the double quote as well.
var (
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
)

func escapeHelp(s string) string  { return helpEscaper.Replace(s) }
func escapeLabel(s string) string { return labelEscaper.Replace(s) }

// formatValue formats a sample value or a bucket bound: a whole number
// below 2⁵³ in plain digits, anything else as Go's shortest
// representation, with +Inf, -Inf and NaN as the format spells them.
func formatValue(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	case v == math.Trunc(v) && math.Abs(v) < 1<<53:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
