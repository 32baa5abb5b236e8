package inspect

import (
	"sync"
	"time"
)

// The helpers of core's tests that this package's tests use, written again
// against core's exported API.

// confEpoch is the instant at which the tests start their clocks:
// 2023-11-14T22:14:00Z, a realistic Unix time aligned to the minute, as
// core's conformance suite starts them.
const confEpoch = int64(1700000040) * int64(time.Second)

// fakeClock is a settable core.Clock for tests.
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

// Advance moves the clock by d (backwards when d < 0).
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now += int64(d)
	c.mu.Unlock()
}
