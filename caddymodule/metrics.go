package caddymodule

import (
	"errors"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/telemetry"
)

// The collectors of decisions and their times are made once per process
// and registered in the metrics registry of every config Caddy loads (one
// per config), as Caddy's own admin metrics are, so that a reload keeps
// counting. A zone's series are labelled by its ID (Zone.id): two sites'
// zones of one name are two series, a share group's zones of one name
// one. No label carries a request's key.
var (
	decisionsVec    = newDecisionsVec()
	decisionSeconds = newDecisionSeconds()
)

func newDecisionsVec() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: telemetry.Decisions,
		Help: telemetry.DecisionsHelp,
	}, []string{"zone", "outcome"})
}

func newDecisionSeconds() prometheus.Histogram {
	return prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    telemetry.DecisionSeconds,
		Help:    telemetry.DecisionSecondsHelp,
		Buckets: telemetry.DecisionBuckets(),
	})
}

// zoneSeries holds a zoneSeriesOf for each zone ID of the running configs,
// so that a reload keeps a zone's series while its ID is unchanged (the
// new config takes its reference before the old one releases its own)
// and the series of a zone that no config has any more leave the scrape.
var zoneSeries = caddy.NewUsagePool()

// zoneSeriesOf is a zone ID's entry in zoneSeries.
type zoneSeriesOf string

// Destruct deletes the zone's series from decisionsVec: the pool calls it
// when the last handler with a zone of this ID is cleaned up.
func (id zoneSeriesOf) Destruct() error {
	for o := 0; o < core.NumOutcomes; o++ {
		decisionsVec.DeleteLabelValues(string(id), core.Outcome(o).String())
	}
	decisionsVec.DeleteLabelValues(string(id), telemetry.OutcomeNearLimit)
	return nil
}

func newBreakerGauge(st *pooledStore) prometheus.GaugeFunc {
	b := st.breaker
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        telemetry.BreakerState,
		Help:        telemetry.BreakerStateHelp,
		ConstLabels: prometheus.Labels{"store": st.label},
	}, func() float64 { return float64(b.State()) })
}

// handlerMetrics are one handler's children of the collectors, looked up
// once at provisioning so that a request costs no label lookup.
type handlerMetrics struct {
	decisions [][core.NumOutcomes]prometheus.Counter // by zone index, then outcome
	nearLimit []prometheus.Counter                   // outcome near_limit, by zone index
	seconds   prometheus.Histogram
}

// newHandlerMetrics registers the collectors in reg (nil: none), unless
// another handler of the same config did, and takes a reference to the
// series of each zone of h, which Cleanup releases.
func (h *Handler) newHandlerMetrics(reg *prometheus.Registry, st *pooledStore) (*handlerMetrics, error) {
	vec, err := register(reg, decisionsVec)
	if err != nil {
		return nil, err
	}
	m := &handlerMetrics{decisions: make([][core.NumOutcomes]prometheus.Counter, len(h.Zones)), nearLimit: make([]prometheus.Counter, len(h.Zones))}
	if m.seconds, err = register(reg, decisionSeconds); err != nil {
		return nil, err
	}
	for i, z := range h.Zones {
		if _, _, err := zoneSeries.LoadOrNew(z.id, func() (caddy.Destructor, error) { return zoneSeriesOf(z.id), nil }); err != nil {
			return nil, err
		}
		h.series = append(h.series, z.id)
		for o := 0; o < core.NumOutcomes; o++ {
			m.decisions[i][o] = vec.WithLabelValues(z.id, core.Outcome(o).String())
		}
		m.nearLimit[i] = vec.WithLabelValues(z.id, telemetry.OutcomeNearLimit)
	}
	if st.breaker != nil {
		if _, err := register(reg, newBreakerGauge(st)); err != nil {
			return nil, err
		}
	}
	if _, err := register(reg, demandCollector{}); err != nil {
		return nil, err
	}
	return m, nil
}

// The descriptions of the demand families, whose values demandCollector
// reads from the zones' recorders at each scrape.
var (
	demandDesc           = prometheus.NewDesc(telemetry.Demand, telemetry.DemandHelp, []string{"zone", "quantile"}, nil)
	demandKeyPeriodsDesc = prometheus.NewDesc(telemetry.DemandKeyPeriods, telemetry.DemandKeyPeriodsHelp, []string{"zone"}, nil)
)

// demandCollector exports the demand of every zone of the running config
// that records it, by zone ID as the decisions are counted: the count
// of key-periods and, once there is one, the quantiles of the demand per
// key-period, of the zones of that ID together (a share group's, whose
// sketches merge), as the recorders have folded them (Recorder.Folded).
// One is registered per metrics registry.
type demandCollector struct{}

// Describe implements prometheus.Collector.
func (demandCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- demandDesc
	ch <- demandKeyPeriodsDesc
}

// Collect implements prometheus.Collector.
func (demandCollector) Collect(ch chan<- prometheus.Metric) {
	now := clockNow()
	byID := map[string]*demand.Sketch{}
	var ids []string
	seen := map[*demand.Recorder]bool{}
	for _, az := range registeredZones() {
		rec := az.z.demand
		if rec == nil || seen[rec] || az.z.fleet != nil {
			continue // a share group's zones record together; a fleet's demand is in Redis
		}
		seen[rec] = true
		sk := byID[az.id]
		if sk == nil {
			sk = new(demand.Sketch)
			byID[az.id] = sk
			ids = append(ids, az.id)
		}
		folded := rec.Folded(now)
		sk.Merge(&folded)
	}
	for _, id := range ids {
		sk := byID[id]
		ch <- prometheus.MustNewConstMetric(demandKeyPeriodsDesc, prometheus.CounterValue, float64(sk.Count()), id)
		for _, q := range sk.Quantiles() {
			ch <- prometheus.MustNewConstMetric(demandDesc, prometheus.GaugeValue, q.Value, id, q.Label)
		}
	}
}

// register registers c in reg and returns it or, when an equal collector
// is already registered, that one. A nil reg registers nothing.
func register[C prometheus.Collector](reg *prometheus.Registry, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// observe counts the verdict v about zone (an index in the handler's zones),
// a near miss when near, and the time the decision took: elapsed minus
// the leaky_bucket wait, which is not known for a cancelled wait, whose
// time is not observed.
func (m *handlerMetrics) observe(zone int, v core.Verdict, elapsed time.Duration, near bool) {
	if o := int(v.Outcome); o >= 0 && o < core.NumOutcomes {
		m.decisions[zone][o].Inc()
	}
	if near {
		m.nearLimit[zone].Inc()
	}
	if v.Outcome == core.OutcomeCancelled {
		return
	}
	if d := elapsed - v.Delay; d > 0 {
		m.seconds.Observe(d.Seconds())
	}
}
