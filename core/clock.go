package core

import (
	"time"

	"github.com/sluicehq/sluice/core/model"
)

// SystemClock returns a model.Clock that reads Unix time once, at creation, and
// advances it by the process's monotonic clock: it never steps backwards when
// the wall clock is adjusted, at the price of drifting from it as much as the
// wall clock is slewed.
func SystemClock() model.Clock {
	c := newSystemClock()
	return c.read
}

// systemClock is what a SystemClock reads. Stores and gates configured
// without a Clock embed one and read it inline, as wall + time.Since(base):
// under Yaegi, calling a Clock closure costs a microsecond more than that,
// and reading a field of an embedded struct allocates less than reading
// one of a named struct field.
type systemClock struct {
	base time.Time
	wall int64 // base in Unix nanoseconds
}

// read returns the clock's instant.
func (c *systemClock) read() int64 { return c.wall + int64(time.Since(c.base)) }

func newSystemClock() systemClock {
	base := time.Now()
	return systemClock{base: base, wall: base.UnixNano()}
}
