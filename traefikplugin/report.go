package traefikplugin

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/model"
)

// reportEvery is the least time between two summary lines of a middleware.
const reportEvery = 10 * time.Second

// report summarizes a middleware's requests that were not simply allowed,
// in at most one line per reportEvery, such as
//
//	sluice api@file: 123 requests rejected in the last 10s
//
// It needs no goroutine: the request that finds the last line at least
// reportEvery old writes the next one, so counts wait for the next such
// request (the line then says how long they cover). The first such request
// after creation writes a line at once.
type report struct {
	name  string
	out   io.Writer
	clock model.Clock // nil: the system clock, read as the time since base
	base  time.Time

	mu      sync.Mutex
	counts  [core.NumOutcomes]int
	since   int64 // instant of the last line
	started bool  // a line has been written
}

// note counts one request of outcome o and writes the summary when due.
// It runs on every rejection, so the rare work is in flush: under Yaegi
// entering a function pays for every value of its body, and calling a
// Clock, an interpreted closure, costs a frame more than reading the
// system clock here.
func note(r *report, o core.Outcome) {
	var now int64
	if r.clock != nil {
		now = r.clock()
	} else {
		now = int64(time.Since(r.base))
	}
	r.mu.Lock()
	if o >= 0 && o < numOutcomes {
		r.counts[o]++
	}
	if r.started && now-r.since < reportEveryNs {
		r.mu.Unlock()
		return
	}
	flush(r, now)
}

// reportEveryNs is reportEvery in nanoseconds, a constant of this package:
// under Yaegi a typed constant of another package is a value allocated on
// every call of a function that uses it.
const reportEveryNs = int64(reportEvery)

// numOutcomes is core.NumOutcomes as an Outcome and a constant of this
// package (see reportEveryNs).
const numOutcomes = core.Outcome(core.NumOutcomes)

// flush writes the summary of r's counts at now and starts the next one;
// it is called with r.mu held and releases it.
func flush(r *report, now int64) {
	counts := r.counts
	r.counts = [core.NumOutcomes]int{}
	first := !r.started
	elapsed := time.Duration(now - r.since)
	r.started, r.since = true, now
	r.mu.Unlock()

	line := summary(counts)
	if line == "" {
		return
	}
	if first {
		line += "; later lines summarize at most every " + reportEvery.String()
	} else {
		line += " in the last " + elapsed.Round(time.Second).String()
	}
	fmt.Fprintf(r.out, "sluice %s: %s\n", r.name, line)
}

// summary describes counts, such as "3 requests rejected, 1 allowed while
// the store failed"; empty when all are zero.
func summary(counts [core.NumOutcomes]int) string {
	var parts []string
	add := func(o core.Outcome, what string) {
		n := counts[o]
		if n == 0 {
			return
		}
		noun := " requests "
		if n == 1 {
			noun = " request "
		}
		parts = append(parts, strconv.Itoa(n)+noun+what)
	}
	add(core.OutcomeRejected, "rejected")
	add(core.OutcomeDryRunRejected, "would have been rejected (dry run)")
	add(core.OutcomeStoreErrorDeny, "denied while the store failed")
	add(core.OutcomeStoreErrorAllow, "allowed while the store failed")
	add(core.OutcomeCancelled, "cancelled by the client before proceeding")
	return strings.Join(parts, ", ")
}
