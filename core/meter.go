package core

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/telemetry"
)

// A Meter counts the verdicts of a lane served by ServeLaneMetered as
// package telemetry's families count them: each verdict by its limit (a
// zone) and outcome, the admissions that left the limit less than its
// near-limit share of the capacity, and the time of each decision in a
// histogram of telemetry.DecisionBuckets. Its counters are plain integers
// updated atomically, which a host reads at any time to export them.
type Meter struct {
	limits  []*model.Limit
	counts  []*Counts
	nearAt  []float64 // by limit: the remaining capacity of a near miss
	seconds *Histogram
}

// NewMeter returns the meter that counts the verdicts about limits[i] in
// counts[i] (counters a host may share between meters, such as those of a
// zone across configuration reloads), counts as a near miss an admission
// leaving less than share of its limit's capacity, and times decisions
// in seconds (which several meters may share).
func NewMeter(limits []*model.Limit, counts []*Counts, share float64, seconds *Histogram) *Meter {
	m := &Meter{limits: limits, counts: counts, seconds: seconds, nearAt: make([]float64, len(limits))}
	for i, l := range limits {
		m.nearAt[i] = share * l.Capacity()
	}
	return m
}

// Counts are the verdicts about one limit, by outcome, and its near
// misses, which telemetry.Decisions reports with the outcome
// telemetry.OutcomeNearLimit.
type Counts struct {
	outcomes [NumOutcomes]uint64
	near     uint64
}

// Outcome returns how many verdicts had outcome o.
func (c *Counts) Outcome(o Outcome) uint64 { return atomic.LoadUint64(&c.outcomes[o]) }

// Near returns how many admissions were near misses.
func (c *Counts) Near() uint64 { return atomic.LoadUint64(&c.near) }

// numDecisionBounds is len(telemetry.DecisionBuckets()), a constant for
// Histogram's arrays (TestHistogramBounds checks it).
const numDecisionBounds = 14

// A Histogram counts decision times in the buckets of
// telemetry.DecisionBuckets, for telemetry.DecisionSeconds.
type Histogram struct {
	bounds [numDecisionBounds]int64 // nanoseconds
	counts [numDecisionBounds + 1]uint64
	sum    uint64 // nanoseconds
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	h := &Histogram{}
	for i, b := range telemetry.DecisionBuckets() {
		h.bounds[i] = int64(b * float64(time.Second))
	}
	return h
}

// Snapshot returns the count of each bucket alone (not cumulative), the
// last those above every bound, and the sum of the times in seconds, as
// telemetry.Exposition.Histogram takes them.
func (h *Histogram) Snapshot() (counts []uint64, sum float64) {
	counts = make([]uint64, len(h.counts))
	for i := range counts {
		counts[i] = atomic.LoadUint64(&h.counts[i])
	}
	return counts, float64(atomic.LoadUint64(&h.sum)) / float64(time.Second)
}
