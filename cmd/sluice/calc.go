package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/model"
)

// calcResult is what calc reports, also as JSON.
type calcResult struct {
	Rate      string  `json:"rate"`
	Algorithm string  `json:"algorithm"`
	Capacity  float64 `json:"capacity"`
	// IntervalMS is the least time between requests that the limit
	// sustains, in milliseconds.
	IntervalMS float64 `json:"interval_ms"`
	// PerSecond is the sustained rate.
	PerSecond float64 `json:"per_second"`
	// BurstMin and BurstMax are the range to choose a burst from: 1 paces
	// requests strictly, the quota lets a period's worth arrive at once.
	BurstMin float64 `json:"burst_min"`
	BurstMax float64 `json:"burst_max"`
	// MaxInPeriod is the most requests the limit admitted in any window
	// of its period, over a greedy client and one bursting around a window
	// boundary, simulated with core.
	MaxInPeriod float64 `json:"max_in_period"`
	// RetryAfterS is the Retry-After, in seconds, of the first request
	// rejected once a burst has emptied the limit.
	RetryAfterS int64 `json:"retry_after_s"`
}

// calcHelp is calc's help, before its flags.
const calcHelp = `usage: sluice calc <rate> [flags]
       sluice calc [<rate>] --demand <advice.json | -> [flags]

Prints what a limit means for a client, computed with sluice's own
algorithm on a simulated clock: the least interval between requests it
sustains, the sustained rate, a burst range to choose from, the most
requests it admits in any window of its period (for a greedy client and
for one bursting around a window boundary) and the Retry-After a client
sees once a burst has emptied it.

A rate is <quota>/<period>: 100/1m, 10/s, 5000/1h, 1/1m30s (units ms, s,
m, h, d, or a Go duration).

With --demand, calc also reads a zone's advice, the JSON that
GET /sluice/zones/<zone>/advice serves (a file, or - for standard input),
and prints the demand it observed per key and period (its quantiles) and
what each candidate limit of the advice would have refused, at least: the
share of key-periods, of keys and of the cost asked; and the share of the
cost it refuses if keys ask steadily, each period starting with an empty
bucket: for such keys the truth lies between the two. The rate is then
optional; given one, calc prints its figures as usual, then the advice,
then the advice's verdict on that limit, or, when the advice holds no
candidate of that rate and burst, the query that asks the endpoint for it
(?candidate=<rate>&burst=<n>): the advice's figures cannot judge another
limit. --algorithm defaults to the zone's, and may not differ from it;
--json does not combine with --demand, whose input is JSON already.

examples:
  sluice calc 100/1m --burst 20
  curl -fsS localhost:2019/sluice/zones/api/advice | sluice calc 150/1m --demand -
`

// calcCommand runs calc; stdin is read when --demand is "-".
func calcCommand(args []string, stdin io.Reader, stdout io.Writer) error {
	fs := flag.NewFlagSet("calc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	burst := fs.Float64("burst", 0, "bucket size (token and leaky buckets); 0: the quota")
	alg := fs.String("algorithm", string(model.TokenBucket), "the algorithm: "+algorithmNames())
	asJSON := fs.Bool("json", false, "print JSON")
	demandPath := fs.String("demand", "", "a zone's advice JSON, a file or - for standard input: print its demand and verdicts (see above)")
	rateText, rest := "", args
	if len(rest) > 0 && rest[0] != "help" && len(rest[0]) > 0 && rest[0][0] != '-' {
		rateText, rest = rest[0], rest[1:]
	}
	if done, err := parseFlags(fs, rest, calcHelp, stdout); done || err != nil {
		return err
	}
	extra := fs.Args()
	if rateText == "" && len(extra) > 0 {
		rateText, extra = extra[0], extra[1:]
	}
	if len(extra) > 0 {
		return fmt.Errorf("calc: unexpected argument %q (see sluice calc --help)", extra[0])
	}
	var advice *demand.Advice
	if *demandPath != "" {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		switch {
		case *asJSON:
			return fmt.Errorf("calc: --json does not combine with --demand, whose input is JSON already")
		case rateText == "" && set["burst"]:
			return fmt.Errorf("calc: --burst needs the limit's rate too, such as calc 100/1m --burst 20 --demand FILE")
		}
		a, err := readAdvice(*demandPath, stdin)
		if err != nil {
			return err
		}
		if !set["algorithm"] {
			*alg = a.Algorithm
		} else if *alg != a.Algorithm {
			return fmt.Errorf("calc: --algorithm %s, but zone %s of the advice is %s: its candidates are judged in the zone's algorithm", *alg, a.Zone, a.Algorithm)
		}
		if rateText == "" {
			writeAdvice(stdout, &a, nil)
			return nil
		}
		advice = &a
	}
	if rateText == "" {
		return fmt.Errorf("calc: want a rate, such as 100/1m, or --demand FILE (see sluice calc --help)")
	}
	rate, err := model.ParseRate(rateText)
	if err != nil {
		return err
	}
	res, err := calc(model.Algorithm(*alg), rate, *burst)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	interval := time.Duration(res.IntervalMS * float64(time.Millisecond)).Round(time.Microsecond)
	fmt.Fprintf(stdout, "limit:                      %s, %s, capacity %s\n", res.Rate, res.Algorithm, num(res.Capacity))
	fmt.Fprintf(stdout, "interval between requests:  %v\n", interval)
	fmt.Fprintf(stdout, "sustained rate:             %s/s\n", num(res.PerSecond))
	fmt.Fprintf(stdout, "burst range:                %s (strict pacing) to %s (a period's worth at once)\n", num(res.BurstMin), num(res.BurstMax))
	fmt.Fprintf(stdout, "most admitted in a period:  %s in any %v\n", num(res.MaxInPeriod), rate.Period)
	fmt.Fprintf(stdout, "Retry-After after a burst:  %d s\n", res.RetryAfterS)
	if advice != nil {
		fmt.Fprintln(stdout)
		writeAdvice(stdout, advice, &demand.Candidate{Rate: rate, Burst: *burst})
	}
	return nil
}

// calc computes calcResult for a limit.
func calc(alg model.Algorithm, rate model.Rate, burst float64) (calcResult, error) {
	l, err := newLimit(alg, rate, burst)
	if err != nil {
		return calcResult{}, err
	}
	unit := rate.Period.Seconds() / rate.Quota
	res := calcResult{
		Rate: rate.String(), Algorithm: string(l.Algorithm), Capacity: l.Capacity(),
		IntervalMS: unit * 1e3, PerSecond: 1 / unit,
		BurstMin: 1, BurstMax: math.Max(1, math.Floor(rate.Quota)),
	}
	// A greedy client: requests far faster than the rate, over three
	// periods; and one that bursts around a window boundary.
	step := time.Duration(unit * float64(time.Second) / 20)
	if min := 3 * rate.Period / maxArrivals; step < min {
		step = min
	}
	if step <= 0 {
		step = 1
	}
	var greedy []arrival
	for t := time.Duration(0); t < 3*rate.Period && len(greedy) < maxArrivals; t += step {
		greedy = append(greedy, arrival{at: t, cost: 1})
	}
	for _, tr := range [][]arrival{greedy, boundaryOrNil(rate)} {
		if o := simulate(l, tr); o.maxWindow > res.MaxInPeriod {
			res.MaxInPeriod = o.maxWindow
		}
	}
	// Empty the limit at once, then one more request.
	n := int(math.Ceil(l.Capacity())) + 1
	if n > maxArrivals {
		n = maxArrivals
	}
	burstTrace := make([]arrival, n)
	for i := range burstTrace {
		burstTrace[i] = arrival{at: rate.Period / 2, cost: 1}
	}
	if o := simulate(l, burstTrace); o.retryAfter > 0 && o.retryAfter != model.Never {
		res.RetryAfterS = int64(math.Ceil(o.retryAfter.Seconds()))
	}
	return res, nil
}

// boundaryOrNil is the boundary trace, or nil when it would be too long.
func boundaryOrNil(rate model.Rate) []arrival {
	t, err := trace("boundary", rate)
	if err != nil {
		return nil
	}
	return t
}

// num formats a count with at most three decimals.
func num(x float64) string {
	return strconv.FormatFloat(math.Round(x*1000)/1000, 'f', -1, 64)
}
