package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/model"
)

// epoch is the simulated clock's origin: a whole number of days after the
// Unix epoch, so that windows align with it as they do on a real clock.
const epoch = int64(1700006400) * int64(time.Second)

// maxArrivals bounds a generated trace.
const maxArrivals = 200000

// arrival is one request of a trace: its instant after the start and its
// cost.
type arrival struct {
	at   time.Duration
	cost float64
}

// outcome is what one algorithm did with a trace.
type outcome struct {
	alg                model.Algorithm
	admitted, rejected int
	maxWindow          float64       // most cost admitted in any window of the period
	longestWait        time.Duration // of an admitted leaky_bucket request
	proceeded          []time.Duration
	retryAfter         time.Duration // of the first rejection, 0 if none
}

// newLimit returns a validated limit named "sim".
func newLimit(alg model.Algorithm, rate model.Rate, burst float64) (*model.Limit, error) {
	l := &model.Limit{Name: "sim", Algorithm: alg, Rate: rate}
	if alg == model.TokenBucket || alg == model.LeakyBucket {
		l.Burst = burst
	}
	if err := l.Validate(); err != nil {
		return nil, err
	}
	return l, nil
}

// simulate replays trace through l in core's in-memory store, on a clock
// that reads each arrival's instant, as one client.
func simulate(l *model.Limit, trace []arrival) outcome {
	now := epoch
	store, err := core.NewMemoryStore(core.MemoryConfig{MaxKeys: 64, Clock: func() int64 { return now }})
	if err != nil {
		panic(err) // MaxKeys is valid
	}
	o := outcome{alg: l.Algorithm}
	asks := []model.Ask{{Limit: l, Key: "client"}}
	out := make([]model.Decision, 1)
	var costs []float64
	for _, a := range trace {
		now = epoch + int64(a.at)
		asks[0].Cost = a.cost
		if err := store.Take(context.Background(), asks, out); err != nil {
			panic(err) // a MemoryStore never fails
		}
		d := out[0]
		if !d.Allowed {
			o.rejected++
			if o.retryAfter == 0 {
				o.retryAfter = d.RetryAfter
			}
			continue
		}
		o.admitted++
		if d.Delay > o.longestWait {
			o.longestWait = d.Delay
		}
		o.proceeded = append(o.proceeded, a.at+d.Delay)
		costs = append(costs, a.cost)
	}
	o.maxWindow = maxInWindow(o.proceeded, costs, l.Rate.Period)
	return o
}

// maxInWindow returns the most cost whose instants fall in any half-open
// window [t, t+period), instants in any order.
func maxInWindow(at []time.Duration, costs []float64, period time.Duration) float64 {
	idx := make([]int, len(at))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return at[idx[a]] < at[idx[b]] })
	best, sum, lo := 0.0, 0.0, 0
	for _, i := range idx {
		sum += costs[i]
		for at[i]-at[idx[lo]] >= period {
			sum -= costs[idx[lo]]
			lo++
		}
		if sum > best {
			best = sum
		}
	}
	return best
}

// trace builds the named trace for rate over three periods: boundary (a
// burst of a quota just before a window boundary and another just after:
// the fixed window's known flaw), uniform (twice the rate, evenly
// spaced), bursty (bursts of half a quota, a third of a period apart), or
// a CSV file of arrival instants in seconds, with an optional cost column.
func trace(name string, rate model.Rate) ([]arrival, error) {
	period := rate.Period
	n := int(math.Ceil(rate.Quota))
	switch name {
	case "boundary":
		if 2*n > maxArrivals {
			return nil, fmt.Errorf("trace boundary: %d requests is too many", 2*n)
		}
		var t []arrival
		spread := period / 20
		for i := 0; i < n; i++ { // just before the boundary at one period
			t = append(t, arrival{at: period - spread + spread*time.Duration(i)/time.Duration(n), cost: 1})
		}
		for i := 0; i < n; i++ { // just after it
			t = append(t, arrival{at: period + spread*time.Duration(i)/time.Duration(n), cost: 1})
		}
		return t, nil
	case "uniform":
		count := 6 * n
		if count > maxArrivals {
			return nil, fmt.Errorf("trace uniform: %d requests is too many", count)
		}
		step := 3 * period / time.Duration(count)
		t := make([]arrival, count)
		for i := range t {
			t[i] = arrival{at: step * time.Duration(i), cost: 1}
		}
		return t, nil
	case "bursty":
		size := (n + 1) / 2
		if 9*size > maxArrivals {
			return nil, fmt.Errorf("trace bursty: %d requests is too many", 9*size)
		}
		var t []arrival
		for b := 0; b < 9; b++ {
			for i := 0; i < size; i++ {
				t = append(t, arrival{at: period * time.Duration(b) / 3, cost: 1})
			}
		}
		return t, nil
	}
	if strings.HasSuffix(name, ".csv") {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return readTrace(f)
	}
	return nil, fmt.Errorf("trace %q: want boundary, uniform, bursty or a .csv file", name)
}

// readTrace reads arrivals, one per line: seconds after the start and,
// after a comma, an optional cost (default 1). Blank lines and lines
// starting with # are skipped; arrivals are sorted by instant.
func readTrace(r io.Reader) ([]arrival, error) {
	var t []arrival
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || s[0] == '#' {
			continue
		}
		at, costText, _ := strings.Cut(s, ",")
		secs, err := strconv.ParseFloat(strings.TrimSpace(at), 64)
		if err != nil || secs < 0 || secs > 1e9 {
			return nil, fmt.Errorf("trace line %d: instant %q: want seconds from 0", line, at)
		}
		cost := 1.0
		if strings.TrimSpace(costText) != "" {
			if cost, err = model.ParseCost(strings.TrimSpace(costText)); err != nil {
				return nil, fmt.Errorf("trace line %d: cost %q: %v", line, costText, err)
			}
		}
		if len(t) == maxArrivals {
			return nil, fmt.Errorf("trace: more than %d arrivals", maxArrivals)
		}
		t = append(t, arrival{at: time.Duration(secs * float64(time.Second)), cost: cost})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	sort.SliceStable(t, func(i, j int) bool { return t[i].at < t[j].at })
	return t, nil
}
