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

// Settle settles on *s at now the admission that m marks, charged cost,
// at actual: it charges the difference when actual is more, and gives it
// back when less (a refund: Settle at an actual of zero gives back the
// whole charge of a request that did not proceed). A charge that m does
// not mark (OK false: a rejection, or one its store did not mark) is left
// as it is.
//
// A charge applies whatever l's capacity. Beyond the capacity the key is
// in debt, and refuses every request (a token_bucket or leaky_bucket with
// MaxDelay delays those it can) until the rate has repaid the debt and
// the request's cost:
//
//   - token_bucket: the deficit grows past the capacity, up to what the
//     rate refills in MaxSpan;
//   - leaky_bucket: the queue ends the charge later, at most MaxSpan from
//     now;
//   - fixed_window, sliding_window_counter: the current window counts
//     the charge more, until it ends;
//   - sliding_window_log: an entry of the charge at now (merged into the
//     newest when the log holds MaxLogQuota).
//
// A refund never leaves more capacity than *s would hold had the
// admission not been made, and never lets a later request proceed sooner
// than the rate allows:
//
//   - leaky_bucket: if the admission is the last one *s holds (the queue
//     still ends where it left it), the queue ends the refund earlier,
//     exactly as if it had not been admitted. Otherwise requests queued
//     behind it keep their departures, and its slot stays taken, a hole
//     in the queue: moving the queue's end back would schedule a new
//     request on top of one still waiting, and let more than the rate
//     through.
//   - token_bucket: the tokens that the bucket as the admission left it
//     would still miss at now, at most the refund, come back: exactly what
//     it took if it is the last admission, and no more than it took
//     otherwise, since the admissions since have only emptied the bucket
//     further. With MaxDelay, only the last admission is refunded, as in
//     a leaky_bucket, since later ones may wait for their tokens.
//   - fixed_window, sliding_window_counter: the refund leaves the count
//     of the window the admission was charged in, while *s still counts
//     it.
//   - sliding_window_log: the refund leaves the entries admitted at or
//     before the admission, newest first (later ones expire later).
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

// charge charges cost on *s at now, whatever l's capacity (see Settle).
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
