// Package telemetry names sluice's metrics, the one definition both hosts
// export: the Caddy module registers them in Caddy's Prometheus registry,
// the Traefik plugin, which cannot reach Traefik's, serves them itself in
// the Prometheus text format. A dashboard or an alert written for one host
// therefore reads the other.
//
// No metric carries a request's key as a label: a zone's label set is
// fixed by its configuration, whatever its traffic.
package telemetry

// The metric families. Names follow Prometheus's conventions: a counter
// ends in _total, a duration is in seconds.
const (
	// Decisions counts requests by the zone reported (the one whose
	// headers the client saw) and the outcome: allowed, rejected,
	// dry_run_rejected, store_error_allowed, store_error_denied,
	// cancelled; and near_limit, among the allowed, those that left the
	// zone less than its near_limit share of the capacity.
	Decisions     = "sluice_decisions_total"
	DecisionsHelp = "Requests decided by sluice, by the zone reported and the outcome (allowed, rejected, dry_run_rejected, store_error_allowed, store_error_denied, cancelled); near_limit counts, among the allowed, those that left the zone less than its near_limit share of the capacity."

	// DecisionSeconds is the time a decision took, the store's round
	// trip included and a leaky_bucket's wait excluded.
	DecisionSeconds     = "sluice_decision_seconds"
	DecisionSecondsHelp = "Time sluice took to decide a request, store round trip included, leaky_bucket waits excluded."

	// BreakerState is the state of the circuit breaker in front of a
	// Redis store, by store: 0 closed, 1 open, 2 half-open.
	BreakerState     = "sluice_store_breaker_state"
	BreakerStateHelp = "State of the circuit breaker in front of a Redis store: 0 closed, 1 open, 2 half-open."

	// Demand is a quantile of the demand per key and period of a zone
	// (the cost its keys asked, admitted or refused, per period of the
	// zone's limit), by zone and quantile (0.5, 0.9, 0.95, 0.99 and 1,
	// the largest), over the key-periods recorded since the last reset.
	Demand     = "sluice_demand"
	DemandHelp = "Demand per key and period of a zone's limit (cost asked, admitted or refused), by quantile, over the key-periods recorded since the last reset."

	// DemandKeyPeriods counts the key-periods recorded in a zone's demand.
	DemandKeyPeriods     = "sluice_demand_key_periods_total"
	DemandKeyPeriodsHelp = "Key-periods recorded in a zone's demand since the last reset."
)

// OutcomeNearLimit is the outcome label of Decisions for the allowed
// decisions that were near misses, counted besides allowed, so that
// allowed keeps its meaning.
const OutcomeNearLimit = "near_limit"

// DefaultNearLimit is the share of a zone's capacity under which an
// admitted request is a near miss, unless the host is told otherwise: one
// that leaves less than 10 % of the capacity.
const DefaultNearLimit = 0.1

// DecisionBuckets are DecisionSeconds's bucket bounds, in seconds.
func DecisionBuckets() []float64 {
	return []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
}

// DemandQuantiles are the quantiles Demand reports.
func DemandQuantiles() []float64 {
	return []float64{0.5, 0.9, 0.95, 0.99, 1}
}
