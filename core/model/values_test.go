package model

// The value forms of Step, Settle and Expires for this package's tests.

// Decide returns the state and decision of Step on s, the admission
// marked as a store marks it. It leaves s as it was, but for a
// sliding_window_log's log, which the returned state may share: Step
// appends past its length, and only a full log is copied, where Step
// merges the newest entry in place (TestDecidePure).
func (l *Limit) Decide(s State, now int64, cost float64) (State, Decision) {
	if len(s.Log) >= MaxLogQuota {
		s.Log = append([]LogEntry(nil), s.Log...)
	}
	var d Decision
	Step(l, &s, now, cost, &d)
	if d.Allowed {
		d.Mark = Mark{T: s.T, A: s.A, OK: true}
	}
	return s, d
}

// Refund (and Charge) leave the log of s as it was.

// Refund returns s with the charge cost of the admission d given back
// at now: Settle at an actual cost of zero.
func (l *Limit) Refund(s State, now int64, cost float64, d Decision) State {
	s.Log = append([]LogEntry(nil), s.Log...)
	Settle(l, &s, now, cost, 0, &d.Mark)
	return s
}

// Charge returns s charged cost at now whatever l's capacity: Settle of
// an admission charged nothing at an actual cost of cost.
func (l *Limit) Charge(s State, now int64, cost float64) State {
	s.Log = append([]LogEntry(nil), s.Log...)
	Settle(l, &s, now, 0, cost, &Mark{OK: true})
	return s
}

// Expiry is Expires of s.
func (l *Limit) Expiry(s State) int64 { return Expires(l, &s) }
