package yaegibench

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestYaegiAllocBudget fails when a request of any case allocates more
// than its ceiling under the interpreter. Yaegi allocates for every value
// of every function a request enters, so the count tracks the cost of the
// interpreted path closely and, unlike time, does not vary from run to
// run: a change that slows the interpreted path fails here. It logs each
// count beside its target.
func TestYaegiAllocBudget(t *testing.T) {
	for i, c := range memoryCases {
		if c.ceiling == 0 {
			continue
		}
		h, nx, req := build(t, c, i)
		m := measure(h, nx, req, 20, 3, 100)
		met := "met"
		if m.allocs > c.target {
			met = "not met"
		}
		if m.allocs > c.ceiling {
			t.Errorf("%s: %.0f allocations per request, more than its ceiling %.0f", c.name, m.allocs, c.ceiling)
		} else {
			t.Logf("%s: %.0f allocations per request (ceiling %.0f; target %.0f %s)", c.name, m.allocs, c.ceiling, c.target, met)
		}
	}
	srv := redistest.Start(t, redistest.Options{})
	for i, c := range redisCases {
		if c.ceiling == 0 {
			continue
		}
		if c.callers != 0 && raceDetector {
			continue
		}
		h, nx, req := build(t, onRedis(c, srv.Addr), len(memoryCases)+i)
		var m cost
		if c.callers != 0 {
			if m = measureParallel(h, nx, req, c.callers, 3, 20); !m.passed {
				t.Errorf("%s: not every request reached the next handler", c.name)
			}
		} else {
			// Five rounds, not three: a round in which a lease ends and
			// is taken again (every half second of the wall clock, which
			// a loaded machine may reach) counts one more script call.
			m = measure(h, nx, req, 20, 5, 100)
		}
		if m.allocs > c.ceiling {
			t.Errorf("%s: %.0f allocations per request, more than its ceiling %.0f", c.name, m.allocs, c.ceiling)
		} else {
			t.Logf("%s: %.0f allocations per request (ceiling %.0f)", c.name, m.allocs, c.ceiling)
		}
	}
}
