package core

import (
	"sync"
	"time"
)

// fakeClock is a settable Clock for tests. Its zero value reads instant 0;
// tests start it at a realistic Unix time (see confEpoch).
type fakeClock struct {
	mu  sync.Mutex
	now int64
}

// Now returns the current instant in nanoseconds; pass c.Now as a Clock.
func (c *fakeClock) Now() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set moves the clock to ns, forwards or backwards.
func (c *fakeClock) Set(ns int64) {
	c.mu.Lock()
	c.now = ns
	c.mu.Unlock()
}

// Advance moves the clock by d (backwards when d < 0).
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += int64(d)
	c.mu.Unlock()
}
