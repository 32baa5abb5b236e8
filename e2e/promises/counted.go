package main

import (
	"fmt"
	"time"
)

// steadyKey is the key of group g's requests that are all answered 200.
func steadyKey(g *group) string { return g.name + "-ok" }

// uncountedLoop sends route r's steady key in group g, one request at a
// time, r.steady a second to the group's hosts in turn, each asking the
// upstream for a 200, until stop is closed.
func (t *topology) uncountedLoop(g *group, r *route, stop <-chan struct{}) {
	every := time.Duration(float64(time.Second) / r.steady)
	next := time.Now()
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		case <-time.After(time.Until(next)):
		}
		t.sendAsking(g.hosts[n%len(g.hosts)], r, steadyKey(g), 200, 0, nil)
		if next = next.Add(every); time.Until(next) < 0 {
			next = time.Now()
		}
	}
}

// countedOnly returns the answers of xs that zone z's bound holds: every
// refusal, and the admissions whose status z counts.
func countedOnly(z *zone, xs []*rec) []*rec {
	var out []*rec
	for _, x := range xs {
		if !x.admitted() || z.counts(x.code) {
			out = append(out, x)
		}
	}
	return out
}

// uncounted checks that route r's steady key in group g, whose requests
// are all answered 200, which its limits do not count, is never refused:
// each admission's charge is given back once it is answered, and its
// requests are sent one at a time. A refusal by Redis is the store's
// fault unless a fault on the group's way to Redis (which may have lost a
// charge's refund: a request keeps its charge when the refund cannot be
// sent) or a stall of the machine (which may have delayed refunds past
// the next requests) came within the time the limits take to forget a
// charge (a full refill, a period) before it; a refusal by a local
// fallback, whose refunds cannot fail, is always the fallback's fault.
func (ev *evaluation) uncounted(g *group, r *route, xs []*rec) {
	t := ev.t
	forget := time.Duration(0)
	for _, z := range r.zones {
		if d := time.Duration(z.capacity() / z.rate() * float64(time.Second)); d > forget {
			forget = d
		}
		if z.period > forget {
			forget = z.period
		}
	}
	forget += 500 * time.Millisecond
	var mine []*rec
	for _, x := range xs {
		if x.key == steadyKey(g) {
			mine = append(mine, x)
		}
	}
	excused := 0
	for _, y := range mine {
		if y.cls != classRedis && y.cls != classFallback {
			continue
		}
		if y.cls == classRedis && (t.faultNear(g, y.s-forget, y.e) || t.stalled(y.h, y.s-forget, y.e) >= 50*time.Millisecond) {
			excused++
			continue
		}
		ev.uncountedChecked++
		if y.admitted() {
			continue
		}
		ev.add(&violation{check: "counted", groups: []*group{g}, recs: near(mine, y.s-forget, y.e), from: y.s, to: y.e,
			msg: fmt.Sprintf("%s: route %s, key %s, whose requests are sent one at a time and all answered 200, which none of its limits counts: request %d was refused by the %s (zone %s)",
				g.name, r.path, y.key, y.id, y.cls, y.zone)})
	}
	ev.uncountedExcused += excused
}
