package main

import (
	"strings"
	"sync"
	"time"
)

// The solo scenario: docs/redis.md says that one instance with fallback
// local and instances 1 never has more than max_in_flight requests of a
// key in flight through an outage, and that a Redis restarted empty,
// which is none the instance sees, loses the slots of the requests in
// flight: up to max_in_flight more may start while they last. At soloAt, the first host of each group
// on the standalone Redis sends max_in_flight requests of a key of its
// own that the backend holds soloHold; the schedule restarts Redis
// empty soloRestart later (schedule); soloAgain after soloAt the host
// gets as many again. The solo check then finds in the backend's
// arrivals whether more than max_in_flight were in progress at once.
const (
	soloAt      = 30 * time.Second
	soloRestart = 150 * time.Millisecond
	soloAgain   = 500 * time.Millisecond
	soloHold    = time.Second
)

// soloKey is the key of the solo scenario in group g.
func soloKey(g *group) string { return g.name + "-solo" }

// holdOf is how long the backend holds each request of route r with
// key: the solo scenario's longer.
func holdOf(r *route, key string) time.Duration {
	if r.solo && strings.HasSuffix(key, "-solo") {
		return soloHold
	}
	return r.hold
}

// soloScenario runs the solo scenario's requests.
func (t *topology) soloScenario() {
	var wg sync.WaitGroup
	for _, at := range []time.Duration{soloAt, soloAt + soloAgain} {
		t.sleepUntil(at)
		for _, g := range t.groupList {
			if g.cluster {
				continue
			}
			r := routeNamed(g, "solo")
			for i := 0; i < r.zones[0].inflight; i++ {
				wg.Add(1)
				go func(g *group) {
					defer wg.Done()
					t.send(g.hosts[0], r, soloKey(g), 0, nil)
				}(g)
			}
		}
	}
	wg.Wait()
}
