package model

import (
	"time"
)

// FlightRetryAfter is the Retry-After of a request refused an in-flight
// slot: short, since a slot frees as soon as any request of the key ends
// (jittered like every Retry-After by answer.Responder.Jitter).
const FlightRetryAfter = time.Second

// newFlightLimit returns the limit that decides the in-flight slots of l.
func newFlightLimit(l *Limit) *Limit {
	f := &Limit{Name: l.Name, MaxInFlight: l.MaxInFlight}
	f.ns = l.Name + ":in_flight"
	f.Hash = fnv1a(f.ns)
	f.capacity = float64(l.MaxInFlight)
	return f
}

// validateFlightOnly finishes Validate for a limit of requests in flight
// only (a zero Rate), which has no algorithm, burst or delay.
func (l *Limit) validateFlightOnly() *FieldError {
	if err := refusal([]check{
		{l.Algorithm != "", "algorithm", string(l.Algorithm), "only a rate has an algorithm"},
		{l.Burst != 0, "burst", "", "only a rate has a burst"},
		{l.MaxDelay != 0, "max_delay", "", "only a rate delays requests"},
		{l.Lease != 0, "lease", "", "only a rate's capacity is leased"},
		{l.Penalty != 0, "penalty", "", "only a rate's refusals start a penalty"},
		{l.CountStatus != nil, "count_status", "", "only a rate's charges are given back"},
		{l.CostFromResponse(), l.responseCostField(), "", "only a rate is charged a cost"},
	}); err != nil {
		err.Needs = "rate"
		return err
	}
	f := l.Flight()
	l.period, l.unit, l.capacity, l.owe = 0, 0, 0, 0
	l.params = [4]string{}
	l.ns, l.Hash = f.ns, f.Hash
	return nil
}

// FlightDecision is the decision of a flight limit l on a request that
// found held slots of its key taken: admitted when one is free, with the
// slots left after it as Remaining; otherwise rejected, to retry after
// FlightRetryAfter. Reset and Next, which a count of requests in progress
// does not know, are FlightRetryAfter when no slot is left, else zero.
func FlightDecision(l *Limit, held int) Decision {
	k := l.MaxInFlight
	d := Decision{Limit: l, Allowed: held < k, Quota: float64(k)}
	if d.Allowed && held+1 < k {
		d.Remaining = float64(k - held - 1)
		return d
	}
	d.Reset, d.Next = FlightRetryAfter, FlightRetryAfter
	if !d.Allowed {
		d.RetryAfter = FlightRetryAfter
	}
	return d
}
