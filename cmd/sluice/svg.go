package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core/model"
)

// seriesStyle is how one algorithm's line is drawn. The styles narrow
// from the first to the last, and the series are drawn in that order,
// so that lines which coincide show as a wide line with narrower,
// differently dashed ones on top of it.
type seriesStyle struct {
	color string
	width float64
	dash  string // stroke-dasharray; "" for solid
}

// seriesStyles are the plot's styles, one per algorithm in order.
var seriesStyles = []seriesStyle{
	{"#1f77b4", 8, ""},
	{"#ff7f0e", 6, "14 5"},
	{"#2ca02c", 4.5, "9 4"},
	{"#d62728", 3, "5 3"},
	{"#9467bd", 1.5, ""},
	{"#8c564b", 1, "2 2"},
}

// arrivalStyle draws the arrivals, beneath every algorithm.
var arrivalStyle = seriesStyle{"#cccccc", 12, ""}

// plot geometry, in pixels: the whole image and the plot area's margins
// (the legend sits in the right one).
const (
	plotWidth, plotHeight                       = 960.0, 500.0
	plotLeft, plotRight, plotTop, plotBottom    = 70.0, 320.0, 80.0, 60.0
	maxTicks                                    = 8
	fontFamily                                  = "DejaVu Sans, Verdana, sans-serif"
	titleSize, labelSize, legendSize, notesSize = 16, 12, 12, 11
)

// writeSVG plots, per algorithm, the count of requests admitted so far
// against time (when they proceed, after any leaky_bucket wait), over the
// arrivals in grey, with the windows' boundaries and one period's quota
// marked, so that the fixed window's two quotas around a boundary stand
// out. The time axis spans the trace's events, from near the first.
func writeSVG(w io.Writer, traceName string, rate model.Rate, tr []arrival, outcomes []outcome) error {
	arrived := arrivalTimes(tr)
	first, last := span(arrived, outcomes)
	if last <= first {
		last = first + rate.Period
	}
	unit := timeUnit(last - first)
	xt := ticks(first.Seconds()/unit.seconds, last.Seconds()/unit.seconds, false)
	lo := time.Duration(xt[0] * unit.seconds * float64(time.Second))
	hi := time.Duration(xt[len(xt)-1] * unit.seconds * float64(time.Second))
	maxY := float64(len(tr))
	if maxY < 1 {
		maxY = 1
	}
	yt := ticks(0, maxY, true)
	top := yt[len(yt)-1]
	innerW, innerH := plotWidth-plotLeft-plotRight, plotHeight-plotTop-plotBottom
	x := func(t time.Duration) float64 { return plotLeft + innerW*float64(t-lo)/float64(hi-lo) }
	y := func(n float64) float64 { return plotHeight - plotBottom - innerH*n/top }

	name := traceName
	if strings.HasSuffix(name, ".csv") {
		name = filepath.Base(name)
	}
	title := fmt.Sprintf("Requests admitted over time: trace %s (%d requests), limit %s", name, len(tr), rate)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="%s" font-size="%d">`+"\n", plotWidth, plotHeight, plotWidth, plotHeight, fontFamily, labelSize)
	fmt.Fprintf(&b, "<title>%s</title>\n", html.EscapeString(title))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%g" height="%g" fill="white"/>`+"\n", plotWidth, plotHeight)
	fmt.Fprintf(&b, `<text class="title" x="%g" y="24" font-size="%d" font-weight="bold">%s</text>`+"\n", plotLeft, titleSize, html.EscapeString(title))
	fmt.Fprintf(&b, `<text x="%g" y="44" font-size="%d" fill="#555">Each line counts the requests an algorithm has let through so far, when they proceed (a leaky_bucket's after its wait).</text>`+"\n", plotLeft, notesSize)

	// Grid and axes.
	for _, v := range yt {
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#eee"/>`+"\n", plotLeft, y(v), plotWidth-plotRight, y(v))
		fmt.Fprintf(&b, `<text class="ytick" data-value="%s" x="%g" y="%.1f" text-anchor="end">%s</text>`+"\n", fmtTick(v), plotLeft-8, y(v)+4, fmtTick(v))
	}
	for _, v := range xt {
		t := time.Duration(v * unit.seconds * float64(time.Second))
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#eee"/>`+"\n", x(t), plotTop, x(t), plotHeight-plotBottom)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="black"/>`+"\n", x(t), plotHeight-plotBottom, x(t), plotHeight-plotBottom+5)
		fmt.Fprintf(&b, `<text class="xtick" data-seconds="%s" x="%.1f" y="%g" text-anchor="middle">%s %s</text>`+"\n", fmtTick(t.Seconds()), x(t), plotHeight-plotBottom+19, fmtTick(v), unit.name)
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">time from the start of the trace</text>`+"\n", plotLeft+innerW/2, plotHeight-plotBottom+40)
	fmt.Fprintf(&b, `<text x="16" y="%g" text-anchor="middle" transform="rotate(-90 16 %g)">requests admitted so far</text>`+"\n", plotTop+innerH/2, plotTop+innerH/2)
	// Window boundaries, labelled above the plot where labels fit.
	labelEnd := 0.0
	for t := (lo + rate.Period - 1) / rate.Period * rate.Period; t <= hi; t += rate.Period {
		fmt.Fprintf(&b, `<line class="boundary" x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#888" stroke-dasharray="6 4"/>`+"\n", x(t), plotTop-4, x(t), plotHeight-plotBottom)
		if x(t)-50 > labelEnd && x(t)+50 < plotWidth-plotRight+40 {
			fmt.Fprintf(&b, `<text x="%.1f" y="%g" font-size="%d" fill="#666" text-anchor="middle">window boundary</text>`+"\n", x(t), plotTop-8, notesSize)
			labelEnd = x(t) + 50
		}
	}
	if q := rate.Quota; q <= top {
		fmt.Fprintf(&b, `<line class="quota" x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#888" stroke-dasharray="2 3"/>`+"\n", plotLeft, y(q), plotWidth-plotRight, y(q))
		fmt.Fprintf(&b, `<text x="%g" y="%.1f" font-size="%d" fill="#666" text-anchor="end">one period's quota: %s</text>`+"\n", plotWidth-plotRight-4, y(q)-5, notesSize, num(q))
	}

	// The series, widest first, then the axes over them.
	writeSeries(&b, "arrivals", arrivalStyle, arrived, lo, x, y)
	for i, o := range outcomes {
		writeSeries(&b, string(o.alg), seriesStyles[i%len(seriesStyles)], o.proceeded, lo, x, y)
	}
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", plotLeft, plotHeight-plotBottom, plotWidth-plotRight, plotHeight-plotBottom)
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", plotLeft, plotTop, plotLeft, plotHeight-plotBottom)

	writeLegend(&b, rate, arrived, outcomes)
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeLegend draws the legend in the right margin: a sample of each line
// with what it admitted, a note on each line that coincides with an
// earlier one, and what the grey marks mean.
func writeLegend(b *strings.Builder, rate model.Rate, arrived []time.Duration, outcomes []outcome) {
	lx, ly := plotWidth-plotRight+20, plotTop+4
	entry := func(label string, st seriesStyle, note string) {
		fmt.Fprintf(b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="%g"%s/>`+"\n", lx, ly, lx+34, ly, st.color, st.width, dashAttr(st))
		fmt.Fprintf(b, `<text class="legend" x="%g" y="%g" font-size="%d">%s</text>`+"\n", lx+42, ly+4, legendSize, html.EscapeString(label))
		ly += 18
		if note != "" {
			fmt.Fprintf(b, `<text class="overlap" x="%g" y="%g" font-size="%d" fill="#666">%s</text>`+"\n", lx+42, ly, notesSize, html.EscapeString(note))
			ly += 16
		}
		ly += 4
	}
	entry(fmt.Sprintf("arrived: %d", len(arrived)), arrivalStyle, "")
	for i, o := range outcomes {
		note := ""
		if sameInstants(o.proceeded, arrived) {
			note = "overlapping the arrivals"
		}
		for _, p := range outcomes[:i] {
			if sameInstants(o.proceeded, p.proceeded) {
				note = "overlapping " + string(p.alg)
				break
			}
		}
		entry(fmt.Sprintf("%s: %d admitted", o.alg, o.admitted), seriesStyles[i%len(seriesStyles)], note)
	}
	ly += 8
	for _, line := range []string{
		"Lines that overlap are drawn narrower",
		"and dashed over wider ones.",
		"Dashed grey: window boundaries,",
		fmt.Sprintf("one every %v.", rate.Period),
		"Dotted grey: one period's quota.",
	} {
		fmt.Fprintf(b, `<text x="%g" y="%g" font-size="%d" fill="#555">%s</text>`+"\n", lx, ly, notesSize, html.EscapeString(line))
		ly += 15
	}
}

// writeSeries draws the cumulative count of instants ts as a step line
// from lo, one vertical run per horizontal position.
func writeSeries(b *strings.Builder, name string, st seriesStyle, ts []time.Duration, lo time.Duration, x func(time.Duration) float64, y func(float64) float64) {
	sorted := sortedInstants(ts)
	fmt.Fprintf(b, `<polyline class="series" data-algorithm="%s" fill="none" stroke="%s" stroke-width="%g"%s stroke-linejoin="round" points="%.1f,%.1f`, html.EscapeString(name), st.color, st.width, dashAttr(st), x(lo), y(0))
	for i := 0; i < len(sorted); {
		px := math.Round(x(sorted[i])*10) / 10
		j := i + 1
		for j < len(sorted) && math.Round(x(sorted[j])*10)/10 == px {
			j++
		}
		fmt.Fprintf(b, " %.1f,%.1f %.1f,%.1f", px, y(float64(i)), px, y(float64(j)))
		i = j
	}
	b.WriteString(`"/>` + "\n")
}

func dashAttr(st seriesStyle) string {
	if st.dash == "" {
		return ""
	}
	return ` stroke-dasharray="` + st.dash + `"`
}

// span is the first and the last instant of the arrivals and of any
// request proceeding.
func span(arrived []time.Duration, outcomes []outcome) (first, last time.Duration) {
	first = time.Duration(math.MaxInt64)
	see := func(ts []time.Duration) {
		for _, t := range ts {
			if t < first {
				first = t
			}
			if t > last {
				last = t
			}
		}
	}
	see(arrived)
	for _, o := range outcomes {
		see(o.proceeded)
	}
	if first > last {
		first = 0
	}
	return first, last
}

// unitOfTime is a unit for the time axis's labels.
type unitOfTime struct {
	name    string
	seconds float64
}

// timeUnit picks the unit in which a span of d reads best.
func timeUnit(d time.Duration) unitOfTime {
	switch {
	case d <= 2*time.Second:
		return unitOfTime{"ms", 1e-3}
	case d <= 150*time.Second:
		return unitOfTime{"s", 1}
	case d <= 150*time.Minute:
		return unitOfTime{"min", 60}
	case d <= 72*time.Hour:
		return unitOfTime{"h", 3600}
	}
	return unitOfTime{"d", 86400}
}

// ticks returns evenly spaced round values, in steps of 1, 2, 2.5 or 5
// times a power of ten (whole numbers if whole is set), from at or below
// lo to at or above hi: as many as fit in maxTicks, at least 5 wherever
// the steps allow it.
func ticks(lo, hi float64, whole bool) []float64 {
	if hi <= lo {
		hi = lo + 1
	}
	for step := math.Pow(10, math.Floor(math.Log10((hi-lo)/maxTicks))); ; step *= 10 {
		for _, f := range []float64{1, 2, 2.5, 5} {
			s := step * f
			first, last := math.Floor(lo/s+1e-9), math.Ceil(hi/s-1e-9)
			if (whole && s != math.Trunc(s)) || last-first+1 > maxTicks {
				continue
			}
			var out []float64
			for k := first; k <= last; k++ {
				out = append(out, k*s)
			}
			return out
		}
	}
}

// fmtTick formats a tick's value without float noise.
func fmtTick(v float64) string {
	return strconv.FormatFloat(math.Round(v*1e6)/1e6, 'f', -1, 64)
}

// sameInstants reports whether a and b hold the same instants, in any
// order.
func sameInstants(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	sa, sb := sortedInstants(a), sortedInstants(b)
	for i := range sa {
		if sa[i] != sb[i] {
			return false
		}
	}
	return true
}

// sortedInstants returns a sorted copy of ts.
func sortedInstants(ts []time.Duration) []time.Duration {
	sorted := append([]time.Duration(nil), ts...)
	for i := 1; i < len(sorted); i++ { // insertion sort: ts are nearly sorted
		for j := i; j > 0 && sorted[j] < sorted[j-1]; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	return sorted
}

func arrivalTimes(tr []arrival) []time.Duration {
	ts := make([]time.Duration, len(tr))
	for i, a := range tr {
		ts[i] = a.at
	}
	return ts
}
