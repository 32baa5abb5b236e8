package main

import (
	"fmt"
	"html"
	"io"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
)

// seriesColors are the plot's colours, one per algorithm in order.
var seriesColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"}

// writeSVG plots, per algorithm, the count of requests admitted so far
// against time (when they proceed, after any leaky_bucket wait), with
// the arrivals in grey and the windows of the period marked, so that the
// fixed window's two quotas around a boundary stand out.
func writeSVG(w io.Writer, rate core.Rate, tr []arrival, outcomes []outcome) error {
	const width, height, left, right, top, bottom = 800.0, 420.0, 60.0, 200.0, 30.0, 40.0
	end := time.Duration(0)
	for _, a := range tr {
		if a.at > end {
			end = a.at
		}
	}
	for _, o := range outcomes {
		for _, t := range o.proceeded {
			if t > end {
				end = t
			}
		}
	}
	if end < rate.Period {
		end = rate.Period
	}
	maxY := float64(len(tr))
	if maxY < 1 {
		maxY = 1
	}
	x := func(t time.Duration) float64 { return left + (width-left-right)*float64(t)/float64(end) }
	y := func(n float64) float64 { return height - bottom - (height-top-bottom)*n/maxY }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<title>Requests admitted over time at %s</title>`+"\n", html.EscapeString(rate.String()))
	fmt.Fprintf(&b, `<rect x="0" y="0" width="%g" height="%g" fill="white"/>`+"\n", width, height)
	for t := time.Duration(0); t <= end; t += rate.Period { // window boundaries
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#ddd"/>`+"\n", x(t), top, x(t), height-bottom)
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%v</text>`+"\n", x(t), height-bottom+16, t)
	}
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", left, height-bottom, width-right, height-bottom)
	fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="black"/>`+"\n", left, top, left, height-bottom)
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="end">%d</text>`+"\n", left-6, top+4, len(tr))
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="end">0</text>`+"\n", left-6, height-bottom+4)
	fmt.Fprintf(&b, `<text x="%g" y="%g">requests admitted so far (grey: arrived)</text>`+"\n", left, top-10)
	writeSeries(&b, "arrivals", "#bbb", arrivalTimes(tr), x, y)
	for i, o := range outcomes {
		color := seriesColors[i%len(seriesColors)]
		writeSeries(&b, string(o.alg), color, o.proceeded, x, y)
		ly := top + 20 + 18*float64(i)
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="3"/>`+"\n", width-right+10, ly-4, width-right+28, ly-4, color)
		fmt.Fprintf(&b, `<text x="%g" y="%g" fill="%s">%s: %d</text>`+"\n", width-right+34, ly, color, html.EscapeString(string(o.alg)), o.admitted)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// writeSeries draws the cumulative count of instants ts as a step line.
func writeSeries(b *strings.Builder, name, color string, ts []time.Duration, x func(time.Duration) float64, y func(float64) float64) {
	sorted := append([]time.Duration(nil), ts...)
	for i := 1; i < len(sorted); i++ { // insertion sort: ts are nearly sorted
		for j := i; j > 0 && sorted[j] < sorted[j-1]; j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	fmt.Fprintf(b, `<polyline class="series" data-algorithm="%s" fill="none" stroke="%s" stroke-width="2" points="%.1f,%.1f`, html.EscapeString(name), color, x(0), y(0))
	for i, t := range sorted {
		fmt.Fprintf(b, " %.1f,%.1f %.1f,%.1f", x(t), y(float64(i)), x(t), y(float64(i+1)))
	}
	b.WriteString(`"/>` + "\n")
}

func arrivalTimes(tr []arrival) []time.Duration {
	ts := make([]time.Duration, len(tr))
	for i, a := range tr {
		ts[i] = a.at
	}
	return ts
}
