package core

import (
	"sync"
	"sync/atomic"
	"time"
)

// Breaker defaults, used when the corresponding field is zero.
const (
	DefaultBreakerFailures = 5
	DefaultBreakerBackoff  = time.Second
)

// BreakerState is the state of a [Breaker].
type BreakerState int32

const (
	// BreakerClosed lets every call through and counts consecutive
	// failures.
	BreakerClosed BreakerState = iota
	// BreakerOpen refuses every call until Backoff has passed since it
	// opened.
	BreakerOpen
	// BreakerHalfOpen has let one probe call through and refuses the
	// others until the probe reports.
	BreakerHalfOpen
)

// breakerClosed is BreakerClosed as the int32 of Breaker.state, for the
// callers that skip the breaker's methods while it is simply closed.
const breakerClosed = int32(BreakerClosed)

// Breaker is a circuit breaker in front of a remote store. It starts closed
// and lets calls through; Failures consecutive failures open it, and it then
// refuses calls for Backoff. After that it lets exactly one probe call
// through (half-open): the probe's success closes it, its failure opens it
// for another Backoff. A probe that reports neither within Backoff is
// presumed lost, and the next call becomes a new probe.
//
// Every call that Allow admits must report its outcome with Success or
// Failure, passing back the probe ticket Allow gave it (zero for a call
// admitted while the breaker was closed, and for one that did not ask
// Allow because State was BreakerClosed). Only an answer of the store is
// an outcome: a call answered without asking it (from a lease the
// instance holds) reports Skipped, which moves nothing. Only the pending
// probe's outcome decides a half-open breaker: outcomes of other calls
// (admitted before it opened, or a probe presumed lost) are ignored while
// it is half-open, as all outcomes are while it is open. Instants are
// nanoseconds on the caller's [model.Clock].
//
// The zero value is a closed breaker with the default settings. A Breaker is
// safe for concurrent use; while closed, Allow and Success cost an atomic
// load. It must not be copied after first use, and its fields must not change
// after first use.
type Breaker struct {
	// Failures is the number of consecutive failures that opens the
	// breaker; zero means DefaultBreakerFailures.
	Failures int
	// Backoff is how long the breaker stays open before it lets a probe
	// through; zero means DefaultBreakerBackoff.
	Backoff time.Duration

	state int32 // a BreakerState; written under mu, read atomically (see breakerClosed)
	fails int32 // consecutive failures while closed; written under mu
	mu    sync.Mutex
	since int64  // instant the breaker opened, or let the probe through
	probe uint64 // ticket of the last probe let through; counts probes
}

// Allow reports whether a call may proceed at instant now. It is false while
// the breaker is open and while a half-open probe is pending; the first call
// at least Backoff after the breaker opened is the probe and gets true with
// a nonzero probe ticket, which its report passes back. A call admitted
// while the breaker is closed gets probe zero.
func (b *Breaker) Allow(now int64) (ok bool, probe uint64) {
	if atomic.LoadInt32(&b.state) == int32(BreakerClosed) {
		return true, 0
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state) {
	case BreakerClosed:
		return true, 0
	case BreakerOpen, BreakerHalfOpen:
		if now-b.since < int64(b.backoff()) {
			return false, 0
		}
		atomic.StoreInt32(&b.state, int32(BreakerHalfOpen))
		b.since = now
		b.probe++
		return true, b.probe
	}
	return false, 0
}

// Success reports that a call Allow admitted with the ticket probe
// succeeded: it resets the failure count of a closed breaker, and the
// pending probe's success closes a half-open one.
func (b *Breaker) Success(probe uint64) {
	if atomic.LoadInt32(&b.state) == int32(BreakerClosed) && atomic.LoadInt32(&b.fails) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state) {
	case BreakerClosed:
		atomic.StoreInt32(&b.fails, 0)
	case BreakerHalfOpen:
		if probe == b.probe {
			atomic.StoreInt32(&b.fails, 0)
			atomic.StoreInt32(&b.state, int32(BreakerClosed))
		}
	}
}

// Skipped reports that a call Allow admitted with the ticket probe ended
// without asking the store, answered locally (from a lease): it says
// nothing of the store, so the breaker's state and failure count stay as
// they are, but the pending probe's ticket is given back, and the next
// call probes the store at once.
func (b *Breaker) Skipped(probe uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if BreakerState(b.state) == BreakerHalfOpen && probe == b.probe {
		b.since -= int64(b.backoff())
	}
}

// Failure reports that a call Allow admitted with the ticket probe failed
// at instant now: the Failures-th consecutive failure opens a closed
// breaker, and the pending probe's failure opens a half-open one again, for
// Backoff from now.
func (b *Breaker) Failure(now int64, probe uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch BreakerState(b.state) {
	case BreakerClosed:
		n := atomic.LoadInt32(&b.fails) + 1
		if int(n) < b.threshold() {
			atomic.StoreInt32(&b.fails, n)
			return
		}
		b.open(now)
	case BreakerHalfOpen:
		if probe == b.probe {
			b.open(now)
		}
	}
}

// State returns the breaker's current state. An open breaker whose Backoff
// has passed reports BreakerOpen until Allow lets the probe through.
func (b *Breaker) State() BreakerState {
	return BreakerState(atomic.LoadInt32(&b.state))
}

// open moves the breaker to BreakerOpen at now; b.mu is held.
func (b *Breaker) open(now int64) {
	atomic.StoreInt32(&b.fails, 0)
	atomic.StoreInt32(&b.state, int32(BreakerOpen))
	b.since = now
}

func (b *Breaker) threshold() int {
	if b.Failures <= 0 {
		return DefaultBreakerFailures
	}
	return b.Failures
}

func (b *Breaker) backoff() time.Duration {
	if b.Backoff <= 0 {
		return DefaultBreakerBackoff
	}
	return b.Backoff
}
