// Command sluice helps choose a rate limit: it turns a limit into the
// numbers a client sees, and replays arrival traces through every
// algorithm with sluice's own core, on a simulated clock.
//
//	sluice calc 100/1m [--burst 20] [--algorithm token_bucket] [--json]
//	sluice sim --rate 10/1m [--burst N] [--algorithms all|a,b] [--trace boundary|uniform|bursty|file.csv] [--svg out.svg]
//
// calc prints the interval between requests that the limit sustains, the
// sustained rate, a burst range to choose from, the most requests the
// limit admits in any window of its period and the Retry-After a client
// sees once a burst has emptied it. sim prints, per algorithm, how many
// requests of the trace were admitted and rejected, the most admitted in
// any window of the period and the longest leaky_bucket wait, and can
// plot the admitted requests over time as SVG.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: sluice calc <rate> [flags] | sluice sim --rate <rate> [flags]")
		return 2
	}
	var err error
	switch args[0] {
	case "calc":
		err = calcCommand(args[1:], stdout)
	case "sim":
		err = simCommand(args[1:], stdout)
	default:
		err = fmt.Errorf("unknown command %q (want calc or sim)", args[0])
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 1
	}
	return 0
}
