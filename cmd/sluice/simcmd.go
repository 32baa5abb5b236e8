package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/core/model"
)

// simHelp is sim's help, before its flags.
const simHelp = `usage: sluice sim --rate <rate> [flags]

Replays a trace of one client's arrivals through each algorithm, with
sluice's own core on a simulated clock, and prints per algorithm how many
requests were admitted and rejected, the most admitted in any window of
the period and the longest wait a leaky_bucket imposed. With --svg it
also plots the requests admitted over time.

A rate is <quota>/<period>: 100/1m, 10/s, 5000/1h, 1/1m30s (units ms, s,
m, h, d, or a Go duration).

traces (--trace), the generated ones over three periods of the rate:
  boundary   a quota just before a window boundary and another just after
             it: the fixed window admits both
  uniform    twice the rate, evenly spaced
  bursty     bursts of half a quota, a third of a period apart
  NAME.csv   your own arrivals, from a file whose name ends in .csv

trace CSV: one arrival per line: the instant in seconds from the start
of the trace (a decimal number from 0), then optionally a comma and the
request's cost (a positive number, default 1). Blank lines and lines
starting with # are skipped (a header line must start with #); lines may
come in any order; at most 200000 arrivals. For example:

  # seconds,cost
  0
  0.5,2
  59.9
  60.1

example:
  sluice sim --rate 10/1m --trace boundary --svg boundary.svg
`

func simCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rateText := fs.String("rate", "", "the limit's rate, such as 10/1m (required)")
	burst := fs.Float64("burst", 0, "bucket size (token and leaky buckets); 0: the quota")
	algs := fs.String("algorithms", "all", "all, or a comma-separated list from: "+algorithmNames())
	traceName := fs.String("trace", "boundary", "boundary, uniform, bursty or a .csv file (see above)")
	svgPath := fs.String("svg", "", "write a plot of admitted requests over time to this file")
	if done, err := parseFlags(fs, args, simHelp, stdout); done || err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("sim: unexpected argument %q (see sluice sim --help)", fs.Arg(0))
	}
	if *rateText == "" {
		return fmt.Errorf("sim: --rate is required, such as --rate 10/1m (see sluice sim --help)")
	}
	rate, err := model.ParseRate(*rateText)
	if err != nil {
		return err
	}
	list := model.Algorithms
	if *algs != "all" {
		list = nil
		for _, a := range strings.Split(*algs, ",") {
			list = append(list, model.Algorithm(strings.TrimSpace(a)))
		}
	}
	tr, err := trace(*traceName, rate)
	if err != nil {
		return err
	}
	outcomes, err := simAll(list, rate, *burst, tr)
	if err != nil {
		return err
	}
	writeTable(stdout, *traceName, rate, len(tr), outcomes)
	if *svgPath != "" {
		f, err := os.Create(*svgPath)
		if err != nil {
			return err
		}
		if err := writeSVG(f, *traceName, rate, tr, outcomes); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	return nil
}

// simAll replays tr through a limit of each algorithm.
func simAll(algs []model.Algorithm, rate model.Rate, burst float64, tr []arrival) ([]outcome, error) {
	var out []outcome
	for _, a := range algs {
		l, err := newLimit(a, rate, burst)
		if err != nil {
			return nil, err
		}
		out = append(out, simulate(l, tr))
	}
	return out, nil
}

// writeTable prints the outcomes, one row per algorithm.
func writeTable(w io.Writer, traceName string, rate model.Rate, arrivals int, outcomes []outcome) {
	fmt.Fprintf(w, "trace %s: %d requests; limit %s\n", traceName, arrivals, rate)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "algorithm\tadmitted\trejected\tmost in any %s\tlongest wait\n", model.FormatPeriod(rate.Period))
	for _, o := range outcomes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%v\n", o.alg, o.admitted, o.rejected, num(o.maxWindow), o.longestWait.Round(time.Millisecond))
	}
	tw.Flush()
}
