// Package testclock is the settable clock that the tests of core and of
// core/inspect drive their stores with, and the instant they start it at.
//
// It uses the standard library only, so that core's tests, which import
// it, also run under Traefik's Yaegi interpreter.
package testclock

import (
	"sync"
	"time"
)

// Epoch is the instant at which the tests start their clocks:
// 2023-11-14T22:14:00Z in Unix nanoseconds, a realistic Unix time aligned
// to the minute, so that windows of a second or a minute start exactly on
// it.
const Epoch = int64(1700000040) * int64(time.Second)

// Clock is a settable clock, safe for concurrent use. Its zero value reads
// instant 0; tests start it at a realistic Unix time (New(Epoch)).
type Clock struct {
	mu  sync.Mutex
	now int64
}

// New returns a clock that reads ns until it is moved.
func New(ns int64) *Clock { return &Clock{now: ns} }

// Now returns the current instant in nanoseconds; pass c.Now as a
// model.Clock.
func (c *Clock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to ns, forwards or backwards.
func (c *Clock) Set(ns int64) {
	c.mu.Lock()
	c.now = ns
	c.mu.Unlock()
}

// Advance moves the clock by d (backwards when d < 0).
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += int64(d)
	c.mu.Unlock()
}
