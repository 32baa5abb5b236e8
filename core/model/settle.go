package model

import (
	"math"
	"strconv"
	"strings"
)

// ResponseCost is the cost that value, the value of l's CostHeader (or the
// bytes of a response's body, in decimal, for CostBytes), states: a
// number as strconv.ParseFloat reads it once surrounding spaces are
// trimmed, at most l's capacity, so that one response leaves at most a
// capacity of debt. ok is false, and the request's estimate stands, for a
// value that is missing, malformed, NaN, infinite or negative.
func ResponseCost(l *Limit, value string) (cost float64, ok bool) {
	cost, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
	if err != nil || !(cost >= 0) || cost > math.MaxFloat64 {
		return 0, false
	}
	if cost > l.capacity {
		cost = l.capacity
	}
	return cost, true
}

// Charge returns s charged cost at now whatever l's capacity: an answer
// that cost more than its request's estimate settles the difference so.
// Beyond the capacity the key is in debt, and refuses every request (a
// token_bucket or leaky_bucket with MaxDelay delays those it can) until
// the rate has repaid the debt and the request's cost:
//
//   - token_bucket: the deficit grows past the capacity, up to what the
//     rate refills in MaxSpan;
//   - leaky_bucket: the queue ends cost later, at most MaxSpan from now;
//   - fixed_window, sliding_window_counter: the current window counts
//     cost more, until it ends;
//   - sliding_window_log: an entry of cost at now (merged into the newest
//     when the log holds MaxLogQuota).
func (l *Limit) Charge(s State, now int64, cost float64) State {
	if l.Algorithm == SlidingWindowLog {
		s.Log = append([]LogEntry(nil), s.Log...) // keep the caller's
	}
	charge(l, &s, now, cost)
	return s
}

// Settle is Charge and Refund in place, for the stores: it settles on *s
// at now the admission that m marks, charged cost, at actual, charging
// the difference or giving it back as Refund does. A charge that m does
// not mark (OK false) is left as it is.
func Settle(l *Limit, s *State, now int64, cost, actual float64, m *Mark) {
	if !m.OK {
		return
	}
	if actual < cost {
		refund(l, s, now, cost-actual, m)
	} else if actual > cost {
		charge(l, s, now, actual-cost)
	}
}

// charge is Charge in place.
func charge(l *Limit, s *State, now int64, cost float64) {
	var d Decision
	Step(l, s, now, 0, &d) // s as of now, charged nothing
	switch l.Algorithm {
	case TokenBucket:
		s.A += cost
		if s.A > l.most {
			s.A = l.most
		}
	case LeakyBucket:
		cost = s.A + cost*l.unit // ns after s.T
		if most := float64(now + int64(MaxSpan) - s.T); cost > most {
			cost = NonNegative(most)
		}
		s.T += int64(cost)
		s.A = cost - float64(int64(cost))
	case SlidingWindowLog:
		if n := len(s.Log); n >= MaxLogQuota {
			s.Log[n-1] = LogEntry{T: s.T, Cost: s.Log[n-1].Cost + cost}
		} else {
			s.Log = append(s.Log, LogEntry{T: s.T, Cost: cost})
		}
		s.A += cost
	default:
		s.A += cost
	}
}
