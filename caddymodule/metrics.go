package caddymodule

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/telemetry"
)

// The collectors, registered once per metrics registry (Caddy makes one per
// loaded config), as package telemetry defines them for both hosts. No
// label carries a request's key.
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

// newHandlerMetrics registers the collectors in reg (nil: none), reusing
// those already registered by another handler of the same config.
func newHandlerMetrics(reg *prometheus.Registry, zones []*Zone, st *pooledStore) (*handlerMetrics, error) {
	vec, err := register(reg, newDecisionsVec())
	if err != nil {
		return nil, err
	}
	m := &handlerMetrics{decisions: make([][core.NumOutcomes]prometheus.Counter, len(zones)), nearLimit: make([]prometheus.Counter, len(zones))}
	if m.seconds, err = register(reg, newDecisionSeconds()); err != nil {
		return nil, err
	}
	for i, z := range zones {
		for o := 0; o < core.NumOutcomes; o++ {
			m.decisions[i][o] = vec.WithLabelValues(z.Name, core.Outcome(o).String())
		}
		m.nearLimit[i] = vec.WithLabelValues(z.Name, telemetry.OutcomeNearLimit)
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
// that records it, by zone name as the decisions are counted: the count
// of key-periods and, once there is one, the quantiles of the demand per
// key-period, of the zones of that name together (sketches merge), as
// the recorders have folded them (Recorder.Folded). One is registered per
// metrics registry.
type demandCollector struct{}

// Describe implements prometheus.Collector.
func (demandCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- demandDesc
	ch <- demandKeyPeriodsDesc
}

// Collect implements prometheus.Collector.
func (demandCollector) Collect(ch chan<- prometheus.Metric) {
	now := clockNow()
	byName := map[string]*demand.Sketch{}
	var names []string
	seen := map[*demand.Recorder]bool{}
	for _, az := range registeredZones() {
		rec := az.z.demand
		if rec == nil || seen[rec] || az.z.fleet != nil {
			continue // a share group's zones record together; a fleet's demand is in Redis
		}
		seen[rec] = true
		sk := byName[az.z.Name]
		if sk == nil {
			sk = new(demand.Sketch)
			byName[az.z.Name] = sk
			names = append(names, az.z.Name)
		}
		folded := rec.Folded(now)
		sk.Merge(&folded)
	}
	for _, name := range names {
		sk := byName[name]
		ch <- prometheus.MustNewConstMetric(demandKeyPeriodsDesc, prometheus.CounterValue, float64(sk.Count()), name)
		for _, q := range sk.Quantiles() {
			ch <- prometheus.MustNewConstMetric(demandDesc, prometheus.GaugeValue, q.Value, name, q.Label)
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
