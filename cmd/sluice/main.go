// Command sluice helps choose a rate limit: it turns a limit into the
// numbers a client sees, and replays arrival traces through every
// algorithm with sluice's own core, on a simulated clock.
//
//	sluice calc 100/1m [--burst 20] [--algorithm token_bucket] [--json]
//	sluice calc [100/1m] --demand advice.json|-
//	sluice sim --rate 10/1m [--burst N] [--algorithms all|a,b] [--trace boundary|uniform|bursty|file.csv] [--svg out.svg]
//	sluice help [calc|sim]
//
// calc prints the interval between requests that the limit sustains, the
// sustained rate, a burst range to choose from, the most requests the
// limit admits in any window of its period and the Retry-After a client
// sees once a burst has emptied it; with --demand, a zone's advice (the
// JSON of GET /sluice/zones/<zone>/advice): the demand observed per key
// and period and what candidate limits would have refused of it, at least
// and from keys that ask steadily. sim
// prints, per algorithm, how many requests of the trace were admitted and
// rejected, the most admitted in any window of the period and the longest
// leaky_bucket wait, and can plot the admitted requests over time as SVG.
// Every command prints its usage and flags on -h, --help or help.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluicehq/sluice/core/model"
)

// usage is sluice's own help.
const usage = `usage: sluice <command> [arguments]

sluice helps choose a rate limit, with sluice's own algorithms on a
simulated clock.

commands:
  calc <rate> [flags]        what a limit means for a client: the interval
                             it sustains, a burst range, the most admitted
                             in a period, the Retry-After after a burst;
                             with --demand, a zone's advice in words
  sim --rate <rate> [flags]  replay a trace of arrivals through every
                             algorithm: admitted, rejected, most in any
                             period, longest wait; optionally an SVG plot
  help [command]             this text, or a command's usage and flags

A rate is <quota>/<period>: 100/1m, 10/s, 5000/1h, 1/1m30s (units ms, s, m,
h, d, or a Go duration).

Run "sluice <command> --help" for a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// run executes one command line, reading any input it names as "-" from
// stdin, and returns the exit status.
func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "calc":
		err = calcCommand(args[1:], stdin, stdout)
	case "sim":
		err = simCommand(args[1:], stdout)
	case "help", "-h", "-help", "--help":
		err = helpCommand(args[1:], stdout)
	default:
		err = fmt.Errorf("unknown command %q (want calc, sim or help)", args[0])
	}
	if err != nil {
		fmt.Fprintln(stderr, "sluice:", err)
		return 1
	}
	return 0
}

// helpCommand prints sluice's help, or with a command's name, that
// command's.
func helpCommand(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		_, err := io.WriteString(stdout, usage)
		return err
	}
	switch args[0] {
	case "calc":
		return calcCommand([]string{"-h"}, nil, stdout)
	case "sim":
		return simCommand([]string{"-h"}, stdout)
	}
	return fmt.Errorf("help: unknown command %q (want calc or sim)", args[0])
}

// parseFlags parses a command's arguments into fs. On -h, -help or
// --help, or when the arguments are the word help, it prints text and
// fs's flags to stdout and reports done; a bad flag is an error that
// names the command and where its help is.
func parseFlags(fs *flag.FlagSet, args []string, text string, stdout io.Writer) (done bool, err error) {
	err = flag.ErrHelp
	if len(args) != 1 || args[0] != "help" {
		err = fs.Parse(args)
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, text)
		fmt.Fprintln(stdout, "\nflags (-name or --name):")
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("%s: %v (see sluice %s --help)", fs.Name(), err, fs.Name())
	}
	return false, nil
}

// algorithmNames lists core's algorithms for a flag's help.
func algorithmNames() string {
	names := make([]string, len(model.Algorithms))
	for i, a := range model.Algorithms {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}
