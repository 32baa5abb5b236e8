package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/core"
)

func simCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	rateText := fs.String("rate", "", "the limit's rate, such as 10/1m")
	burst := fs.Float64("burst", 0, "bucket size (token and leaky buckets); 0: the quota")
	algs := fs.String("algorithms", "all", "all, or a comma-separated list")
	traceName := fs.String("trace", "boundary", "boundary, uniform, bursty or a .csv file of arrival seconds[,cost]")
	svgPath := fs.String("svg", "", "write a plot of admitted requests over time to this file")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("sim: %v", err)
	}
	if *rateText == "" {
		return fmt.Errorf("sim: --rate is required, such as --rate 10/1m")
	}
	rate, err := core.ParseRate(*rateText)
	if err != nil {
		return err
	}
	list := core.Algorithms
	if *algs != "all" {
		list = nil
		for _, a := range strings.Split(*algs, ",") {
			list = append(list, core.Algorithm(strings.TrimSpace(a)))
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
		if err := writeSVG(f, rate, tr, outcomes); err != nil {
			f.Close()
			return err
		}
		return f.Close()
	}
	return nil
}

// simAll replays tr through a limit of each algorithm.
func simAll(algs []core.Algorithm, rate core.Rate, burst float64, tr []arrival) ([]outcome, error) {
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
func writeTable(w io.Writer, traceName string, rate core.Rate, arrivals int, outcomes []outcome) {
	fmt.Fprintf(w, "trace %s: %d requests; limit %s\n", traceName, arrivals, rate)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "algorithm\tadmitted\trejected\tmost in any %v\tlongest wait\n", rate.Period)
	for _, o := range outcomes {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%v\n", o.alg, o.admitted, o.rejected, num(o.maxWindow), o.longestWait.Round(time.Millisecond))
	}
	tw.Flush()
}
