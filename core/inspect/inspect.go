package inspect

import (
	"context"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
)

// KeyState is what a store holds for one (limit, key), read without
// charging it: what an operator asks about a client.
type KeyState struct {
	// Present reports whether the key's state differs from a fresh key's:
	// the store holds a live state for it in which the limit is short of
	// whole (Reset > 0). A key never seen, forgotten, expired or whose
	// limit is whole again reads as absent, with the limit whole, although
	// the store may still hold its state for a while (a rejected request
	// keeps it alive; see core.MemoryStore).
	Present bool
	// Remaining is the cost that could be admitted now; never negative.
	Remaining float64
	// Reset is the time until the limit is whole again for the key.
	Reset time.Duration
	// Next is the time until more than Remaining is available (see
	// core.Decision.Next); zero when whole.
	Next time.Duration
	// Queued is the cost admitted with a delay that the limit still
	// holds: a leaky_bucket's queue (the requests waiting for their turn
	// and the one whose interval is running), a token_bucket's tokens lent
	// to waiting requests (MaxDelay). It is zero for the window
	// algorithms, which never delay.
	Queued float64
	// Penalty, for a limit with a Penalty, is how long the key is still
	// held out, refused whatever its state; zero when it is not. A key
	// held out is present, with nothing remaining, and Next and Reset at
	// least the penalty's time.
	Penalty time.Duration
	// InFlight, for a limit with MaxInFlight, is the number of the key's
	// requests in progress, each holding a slot (in Redis, the leases that
	// have not expired). For a limit of requests in flight only, Present
	// reports whether any is, and Remaining is the slots left.
	InFlight int
}

// Inspector reports and forgets the states of a store's keys, for
// operators. Of returns one for a core.MemoryStore or a redisstore.Store.
type Inspector interface {
	// Peek reports the state of (l, key) at the store's current instant
	// without changing it. key is the Ask's Key.
	Peek(ctx context.Context, l *model.Limit, key string) (KeyState, error)
	// Delete forgets the rate state of (l, key), so that its next request
	// finds the limit whole, and reports whether a state was held. The
	// slots of requests in progress (MaxInFlight) are theirs until they
	// end: Delete leaves them.
	Delete(ctx context.Context, l *model.Limit, key string) (bool, error)
}

// Of returns the Inspector of store s, a *core.MemoryStore or a
// *redisstore.Store; ok is false for any other Store.
func Of(s model.Store) (in Inspector, ok bool) {
	switch st := s.(type) {
	case *core.MemoryStore:
		return memoryInspector{st}, true
	case *redisstore.Store:
		return redisInspector{st}, true
	}
	return nil, false
}

// memoryInspector is the Inspector of a MemoryStore.
type memoryInspector struct{ s *core.MemoryStore }

// Peek implements Inspector. It reads the state under its shard's lock,
// hashed as Take hashes it (core.MemoryStore.InspectKey). A state is live
// until it expires.
func (m memoryInspector) Peek(ctx context.Context, l *model.Limit, key string) (KeyState, error) {
	var ks KeyState
	if l.Rated() {
		st, exp, until, now := m.s.InspectKey(l, key, false)
		ks = penalised(peekState(l, st, exp > now, now), until-now)
	}
	if l.MaxInFlight == 0 {
		return ks, nil
	}
	return flightState(l, ks, m.s.HeldSlots(l, key)), nil
}

// Delete implements Inspector: it reports whether the state or the
// penalty it forgot was live.
func (m memoryInspector) Delete(ctx context.Context, l *model.Limit, key string) (bool, error) {
	if !l.Rated() {
		return false, nil
	}
	_, exp, until, now := m.s.InspectKey(l, key, true)
	return exp > now || until > now, nil
}

// penalised completes ks, a key's state, with the time left ns of its
// penalty (none when not positive).
func penalised(ks KeyState, left int64) KeyState {
	if left <= 0 {
		return ks
	}
	ks.Present, ks.Remaining, ks.Penalty, ks.Next = true, 0, time.Duration(left), time.Duration(left)
	if ks.Reset < ks.Penalty {
		ks.Reset = ks.Penalty
	}
	return ks
}

// flightState completes ks, the state of (l, key) held or not, with the
// key's held requests in flight, for a limit with MaxInFlight.
func flightState(l *model.Limit, ks KeyState, held int) KeyState {
	ks.InFlight = held
	if !l.Rated() {
		ks.Present, ks.Remaining = held > 0, float64(l.MaxInFlight-held)
		if ks.Remaining < 0 {
			ks.Remaining = 0
		}
	}
	return ks
}

// peekState computes the KeyState of st, the state of a key of l held
// (live) or not, at now. It decides a cost of zero on st, which charges
// nothing and reports what is left, except for a sliding window log,
// where a zero-cost entry would count as an admission.
func peekState(l *model.Limit, st model.State, live bool, now int64) KeyState {
	if !live {
		return KeyState{Remaining: l.Capacity()}
	}
	if l.Algorithm == model.SlidingWindowLog {
		return wholeAbsent(l, peekLog(l, st, now))
	}
	var d model.Decision
	model.Step(l, &st, now, 0, &d)
	ks := KeyState{Present: true, Remaining: d.Remaining, Reset: d.Reset, Next: d.Next}
	switch l.Algorithm {
	case model.TokenBucket:
		// Past the capacity, the deficit is what the bucket lent.
		ks.Queued = nonNegative(st.A - l.Capacity())
	case model.LeakyBucket:
		// The queue drains at st.T + st.A, a nanosecond of the period
		// per unit of cost over the quota.
		unit := float64(l.Rate.Period) / l.Rate.Quota
		ks.Queued = nonNegative(float64(st.T-now)+st.A) / unit
	}
	return wholeAbsent(l, ks)
}

// wholeAbsent returns ks, the state of a key of l that the store holds,
// or the absent state when its limit is whole (see KeyState.Present).
func wholeAbsent(l *model.Limit, ks KeyState) KeyState {
	if ks.Reset <= 0 {
		return KeyState{Remaining: l.Capacity()}
	}
	return ks
}

// peekLog is peekState for a sliding window log: the entries of the last
// period count, the oldest expiring first. It drops the entries that no
// longer count as the algorithm does (trimLog in core/model/window.go), so that
// Remaining is the float the next decision computes.
func peekLog(l *model.Limit, st model.State, now int64) KeyState {
	if now < st.T {
		now = st.T
	}
	period := int64(l.Rate.Period)
	log, a := st.Log, st.A
	for len(log) > 0 && log[0].T+period <= now {
		a -= log[0].Cost
		log = log[1:]
	}
	if len(log) == 0 {
		return KeyState{Remaining: l.Capacity()}
	}
	return KeyState{
		Present:   true,
		Remaining: nonNegative(l.Capacity() - a),
		Reset:     duration(float64(log[len(log)-1].T + period - now)),
		Next:      duration(float64(log[0].T + period - now)),
	}
}

// duration converts nanoseconds to a Duration, rounding up, as the
// decisions do (core/model/algorithm.go).
func duration(ns float64) time.Duration {
	if ns <= 0 {
		return 0
	}
	if ns >= float64(model.Never) {
		return model.Never
	}
	d := time.Duration(ns)
	if float64(d) < ns {
		d++
	}
	return d
}

func nonNegative(x float64) float64 {
	if x < 0 {
		return 0
	}
	return x
}
