package core

import (
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/telemetry"
)

// A Meter counts the verdicts of a lane served by ServeLaneMetered as
// package telemetry's families count them: each verdict by its limit (a
// zone) and outcome, the admissions that left the limit less than its
// near-limit share of the capacity, and the time of each decision in a
// histogram of telemetry.DecisionBuckets; and, with recorders, each ask's
// cost in its limit's demand (package demand). Its counters are plain
// integers updated atomically, which a host reads at any time to export
// them.
type Meter struct {
	limits  []*model.Limit
	counts  []*Counts
	nearAt  []float64 // by limit: the remaining capacity of a near miss
	seconds *Histogram
	// demand, by limit, records the demand of the limits that have a
	// recorder; nil when none has.
	demand []*demand.Recorder
	clock  model.Clock // the demand's instants; nil: the system's
}

// MeterConfig configures a Meter.
type MeterConfig struct {
	// Limits are the lane's limits; the meter counts the verdicts about
	// Limits[i] in Counts[i] (counters a host may share between meters,
	// such as those of a zone across configuration reloads).
	Limits []*model.Limit
	Counts []*Counts
	// NearShare is the share of a limit's capacity under which an
	// admission counts as a near miss.
	NearShare float64
	// Seconds times the decisions (several meters may share it).
	Seconds *Histogram
	// Demand, if set, holds by limit the recorder of its demand, or nil
	// for a limit whose demand is not recorded.
	Demand []*demand.Recorder
	// Clock gives the instants of the demand of the requests Gate.Serve
	// decides; nil means the system's. One limit in memory records at
	// its store's instant, the decision's.
	Clock model.Clock
}

// NewMeter returns the meter of cfg.
func NewMeter(cfg MeterConfig) *Meter {
	m := &Meter{limits: cfg.Limits, counts: cfg.Counts, seconds: cfg.Seconds, nearAt: make([]float64, len(cfg.Limits)), clock: cfg.Clock}
	for i, l := range cfg.Limits {
		m.nearAt[i] = cfg.NearShare * l.Capacity()
	}
	for _, r := range cfg.Demand {
		if r != nil {
			m.demand = cfg.Demand
			break
		}
	}
	return m
}

// NearMiss reports whether v is a near miss of a limit whose near misses
// leave less than nearAt of its capacity: an admission by a limit that
// left less than that. A host that counts near misses itself (the Caddy
// module) asks this; the lane's laneCount writes it out.
func (v *Verdict) NearMiss(nearAt float64) bool {
	return v.Outcome == OutcomeAllowed && v.Decision.Limit != nil && v.Decision.Remaining < nearAt
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
	bounds [numDecisionBounds]time.Duration
	counts [numDecisionBounds + 1]uint64
	sum    uint64 // nanoseconds
}

// NewHistogram returns an empty histogram.
func NewHistogram() *Histogram {
	h := &Histogram{}
	for i, b := range telemetry.DecisionBuckets() {
		h.bounds[i] = time.Duration(b * float64(time.Second))
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
