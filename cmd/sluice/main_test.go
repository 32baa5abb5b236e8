package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// sluice runs one command line and returns its output.
func sluice(t *testing.T, args ...string) string {
	t.Helper()
	var out, errOut bytes.Buffer
	if code := run(args, nil, &out, &errOut); code != 0 {
		t.Fatalf("sluice %s: exit %d: %s", strings.Join(args, " "), code, errOut.String())
	}
	return out.String()
}

func TestCalc(t *testing.T) {
	out := sluice(t, "calc", "100/1m")
	for _, want := range []string{"interval between requests:  600ms", "sustained rate:             1.667/s", "Retry-After after a burst:  1 s"} {
		if !strings.Contains(out, want) {
			t.Errorf("calc 100/1m:\n%s\nwant a line %q", out, want)
		}
	}
	var res calcResult
	if err := json.Unmarshal([]byte(sluice(t, "calc", "100/1m", "--burst", "20", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	// A bucket of 20 refilled at 100 per minute admits at most 20 + 100
	// in any minute (one less, as the simulated client is discrete).
	if res.IntervalMS != 600 || res.Capacity != 20 || res.MaxInPeriod < 115 || res.MaxInPeriod > 120 || res.RetryAfterS != 1 {
		t.Errorf("calc 100/1m --burst 20: %+v", res)
	}
	if err := json.Unmarshal([]byte(sluice(t, "calc", "10/1m", "--algorithm", "fixed_window", "--json")), &res); err != nil {
		t.Fatal(err)
	}
	if res.MaxInPeriod != 20 {
		t.Errorf("fixed_window 10/1m admits %v in some minute, want 20 (two quotas at a boundary)", res.MaxInPeriod)
	}
	var errOut bytes.Buffer
	if code := run([]string{"calc", "0.5/s", "--algorithm", "fixed_window"}, nil, io.Discard, &errOut); code == 0 || !strings.Contains(errOut.String(), "1/2s") {
		t.Errorf("calc of a window quota below 1: exit %d, %q", code, errOut.String())
	}
}

// TestSimGolden compares sim's table for each generated trace with its
// golden file; SLUICE_UPDATE_GOLDEN=1 rewrites them.
func TestSimGolden(t *testing.T) {
	for _, tr := range []string{"boundary", "uniform", "bursty"} {
		got := sluice(t, "sim", "--rate", "10/1m", "--trace", tr)
		if want, ok := golden(t, filepath.Join("testdata", "sim-"+tr+".golden"), []byte(got)); !ok {
			t.Errorf("sim --trace %s:\n%s\nwant:\n%s", tr, got, want)
		}
	}
}

// svgElement is an element of a plot: its name, attributes and text.
type svgElement struct {
	name  string
	attr  map[string]string
	text  string
	class string
}

// parseSVG returns the elements of an SVG document in order, failing the
// test if it is not well-formed XML with an svg root.
func parseSVG(t *testing.T, data []byte) []svgElement {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(data))
	var els []svgElement
	open := -1
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v", err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			el := svgElement{name: tok.Name.Local, attr: map[string]string{}}
			for _, a := range tok.Attr {
				el.attr[a.Name.Local] = a.Value
			}
			el.class = el.attr["class"]
			els = append(els, el)
			open = len(els) - 1
		case xml.CharData:
			if open >= 0 {
				els[open].text += string(tok)
			}
		case xml.EndElement:
			open = -1
		}
	}
	if len(els) == 0 || els[0].name != "svg" {
		t.Fatalf("root is not svg: %v", els)
	}
	return els
}

// TestSimSVG: the plot of the boundary trace explains itself: a visible
// title naming the trace and the limit, one series per algorithm besides
// the arrivals, each drawn in its own colour and dash and narrower than
// those drawn before it (so that coinciding lines all show), a legend
// entry for each that names the lines it overlaps, 5 to 8 evenly spaced
// ticks with units on each axis, and a time axis that starts within one
// tick of the first arrival (57 s), not at 0.
func TestSimSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sim.svg")
	sluice(t, "sim", "--rate", "10/1m", "--trace", "boundary", "--svg", path)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	els := parseSVG(t, data)
	series := map[string]bool{}
	styles := map[string]string{}
	var title, legend, overlaps []string
	var xs, ys []float64
	var xLabels []string
	lastWidth := math.Inf(1)
	for _, el := range els {
		switch {
		case el.name == "polyline" && el.class == "series":
			alg := el.attr["data-algorithm"]
			series[alg] = true
			style := el.attr["stroke"] + " " + el.attr["stroke-width"] + " " + el.attr["stroke-dasharray"]
			if other, ok := styles[style]; ok {
				t.Errorf("%s and %s are drawn alike: %s", alg, other, style)
			}
			styles[style] = alg
			w, err := strconv.ParseFloat(el.attr["stroke-width"], 64)
			if err != nil || w >= lastWidth {
				t.Errorf("%s: stroke-width %q, want narrower than the line before, %v", alg, el.attr["stroke-width"], lastWidth)
			}
			lastWidth = w
		case el.class == "title":
			title = append(title, el.text)
		case el.class == "legend":
			legend = append(legend, el.text)
		case el.class == "overlap":
			overlaps = append(overlaps, el.text)
		case el.class == "xtick":
			v, err := strconv.ParseFloat(el.attr["data-seconds"], 64)
			if err != nil {
				t.Fatal(err)
			}
			xs = append(xs, v)
			xLabels = append(xLabels, el.text)
		case el.class == "ytick":
			v, err := strconv.ParseFloat(el.attr["data-value"], 64)
			if err != nil {
				t.Fatal(err)
			}
			ys = append(ys, v)
		}
	}
	if len(series) != 6 || !series["arrivals"] || !series["fixed_window"] || !series["sliding_window_counter"] {
		t.Errorf("series %v; want the arrivals and five algorithms", series)
	}
	if len(title) != 1 || !strings.Contains(title[0], "trace boundary") || !strings.HasSuffix(title[0], "limit 10/1m") {
		t.Errorf("title %q; want one naming the trace and the limit", title)
	}
	wantLegend := []string{"arrived: 20", "token_bucket: 10 admitted", "leaky_bucket: 10 admitted", "fixed_window: 20 admitted", "sliding_window_log: 10 admitted", "sliding_window_counter: 10 admitted"}
	if strings.Join(legend, "|") != strings.Join(wantLegend, "|") {
		t.Errorf("legend %q, want %q", legend, wantLegend)
	}
	wantOverlaps := []string{"overlapping the arrivals", "overlapping token_bucket", "overlapping token_bucket"}
	if strings.Join(overlaps, "|") != strings.Join(wantOverlaps, "|") {
		t.Errorf("overlap notes %q, want %q", overlaps, wantOverlaps)
	}
	for _, axis := range []struct {
		name string
		v    []float64
	}{{"x", xs}, {"y", ys}} {
		if len(axis.v) < 5 || len(axis.v) > 8 {
			t.Errorf("%s axis: %d ticks %v, want 5 to 8", axis.name, len(axis.v), axis.v)
			continue
		}
		for i := 2; i < len(axis.v); i++ {
			if math.Abs((axis.v[i]-axis.v[i-1])-(axis.v[1]-axis.v[0])) > 1e-9 {
				t.Errorf("%s axis: ticks %v are not evenly spaced", axis.name, axis.v)
			}
		}
	}
	if len(xs) > 1 && (xs[0] > 57 || xs[0] <= 57-(xs[1]-xs[0])) {
		t.Errorf("time axis starts at %v s, want within one tick below the first arrival at 57 s", xs[0])
	}
	for _, l := range xLabels {
		if !strings.HasSuffix(l, " s") {
			t.Errorf("time tick %q has no unit", l)
		}
	}
}

// TestDocPlot: the plots of docs/algorithms.md, docs/sim-<trace>.svg, are
// what sim draws today; SLUICE_UPDATE_GOLDEN=1 rewrites them.
func TestDocPlot(t *testing.T) {
	for _, trace := range []string{"boundary", "bursty", "uniform"} {
		path := filepath.Join(t.TempDir(), "sim.svg")
		sluice(t, "sim", "--rate", "10/1m", "--trace", trace, "--svg", path)
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		doc := filepath.Join("..", "..", "docs", "sim-"+trace+".svg")
		if _, ok := golden(t, doc, got); !ok {
			t.Errorf("%s is not what sim --rate 10/1m --trace %s --svg draws: run SLUICE_UPDATE_GOLDEN=1 go test ./cmd/sluice", doc, trace)
		}
	}
}

func TestSimCSVTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "trace.csv")
	if err := os.WriteFile(path, []byte("# seconds,cost\n0\n0.5,2\n\n1\n59.9\n60.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out := sluice(t, "sim", "--rate", "2/1m", "--algorithms", "fixed_window,token_bucket", "--trace", path)
	if !strings.Contains(out, "trace "+path+": 5 requests") || !strings.Contains(out, "fixed_window") || strings.Contains(out, "leaky_bucket") {
		t.Errorf("sim of a CSV trace:\n%s", out)
	}
	if err := os.WriteFile(path, []byte("soon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var errOut bytes.Buffer
	if code := run([]string{"sim", "--rate", "2/1m", "--trace", path}, nil, io.Discard, &errOut); code == 0 || !strings.Contains(errOut.String(), "line 1") {
		t.Errorf("bad CSV: exit %d, %q", code, errOut.String())
	}
}

// TestHelp: sluice and each command print their usage and flags to
// stdout on -h, --help and help, and exit 0.
func TestHelp(t *testing.T) {
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"-h"}, []string{"usage: sluice <command>", "calc <rate>", "sim --rate", "help [command]"}},
		{[]string{"--help"}, []string{"usage: sluice <command>"}},
		{[]string{"-help"}, []string{"usage: sluice <command>"}},
		{[]string{"help"}, []string{"usage: sluice <command>"}},
		{[]string{"calc", "-h"}, []string{"usage: sluice calc <rate>", "-burst", "-algorithm", "-json", "-demand", "sliding_window_counter"}},
		{[]string{"calc", "--help"}, []string{"usage: sluice calc <rate>", "-burst"}},
		{[]string{"calc", "help"}, []string{"usage: sluice calc <rate>", "-burst"}},
		{[]string{"calc", "100/1m", "--help"}, []string{"usage: sluice calc <rate>"}},
		{[]string{"help", "calc"}, []string{"usage: sluice calc <rate>", "-burst"}},
		{[]string{"sim", "-h"}, []string{"usage: sluice sim --rate", "-rate", "-burst", "-algorithms", "-trace", "-svg", "trace CSV:"}},
		{[]string{"sim", "--help"}, []string{"usage: sluice sim --rate", "-svg", "trace CSV:"}},
		{[]string{"sim", "help"}, []string{"usage: sluice sim --rate", "-svg"}},
		{[]string{"help", "sim"}, []string{"usage: sluice sim --rate", "trace CSV:"}},
	} {
		var out, errOut bytes.Buffer
		code := run(c.args, nil, &out, &errOut)
		if code != 0 || errOut.Len() != 0 {
			t.Errorf("sluice %s: exit %d, stderr %q; want 0 and nothing", strings.Join(c.args, " "), code, errOut.String())
		}
		for _, w := range c.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("sluice %s: output lacks %q:\n%s", strings.Join(c.args, " "), w, out.String())
			}
		}
	}
}

// TestHelpCSVExample: the trace CSV example in sim's help is a trace
// that sim reads as the help says.
func TestHelpCSVExample(t *testing.T) {
	help := sluice(t, "sim", "--help")
	_, rest, ok := strings.Cut(help, "For example:\n")
	example, _, ok2 := strings.Cut(rest, "\nexample:")
	if !ok || !ok2 {
		t.Fatalf("sim's help has no CSV example:\n%s", help)
	}
	tr, err := readTrace(strings.NewReader(example))
	if err != nil || len(tr) != 4 || tr[1].cost != 2 || tr[3].at != 60100*time.Millisecond {
		t.Errorf("the help's example reads as %+v, %v; want 4 arrivals, the second of cost 2, the last at 60.1 s", tr, err)
	}
}

// TestUsageErrors: a bad command line exits non-zero with an error on
// stderr that says where the help is; no arguments print the usage.
func TestUsageErrors(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{nil, 2, "usage: sluice <command>"},
		{[]string{"nope"}, 1, `unknown command "nope"`},
		{[]string{"help", "nope"}, 1, `unknown command "nope"`},
		{[]string{"calc", "--bogus"}, 1, "see sluice calc --help"},
		{[]string{"calc", "10/1m", "extra"}, 1, `unexpected argument "extra"`},
		{[]string{"calc"}, 1, "want a rate"},
		{[]string{"sim", "--rate", "10/1m", "extra"}, 1, `unexpected argument "extra"`},
		{[]string{"sim"}, 1, "see sluice sim --help"},
	} {
		var out, errOut bytes.Buffer
		if code := run(c.args, nil, &out, &errOut); code != c.code || !strings.Contains(errOut.String(), c.want) || out.Len() != 0 {
			t.Errorf("sluice %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(c.args, " "), code, out.String(), errOut.String(), c.code, c.want)
		}
	}
}

// golden compares got with the golden file path and returns the file's
// contents and whether they are equal; with SLUICE_UPDATE_GOLDEN=1 it
// writes got to path instead and reports them equal.
func golden(t *testing.T, path string, got []byte) ([]byte, bool) {
	t.Helper()
	if os.Getenv("SLUICE_UPDATE_GOLDEN") == "1" {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return got, true
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return want, bytes.Equal(got, want)
}
