package main

import (
	"fmt"
	"sort"
	"time"
)

// excess is the most admitted beyond a zone's bound (B + r·T, its quota
// per window or period) in any interval, all answers counted: those of
// Redis, of the local fallback and of the failure policy. It measures
// what each failure policy let through beyond the limit, which README
// documents (allow: everything from an outage's start to the recovery;
// fallback local: the instances' shares; deny: nothing).
type excess struct {
	over     float64
	what     string
	from, to time.Duration
}

// measureExcess notes in ev the excess of zone z's admissions (route r,
// group g) under r's policy.
func (ev *evaluation) measureExcess(g *group, r *route, z *zone, xs []*rec) {
	byKey := map[string][]*rec{}
	for _, x := range xs {
		if x.admitted() && (x.cls == classRedis || x.cls == classFallback || x.cls == classPolicy) {
			byKey[keyOf(z, x.key)] = append(byKey[keyOf(z, x.key)], x)
		}
	}
	for k, adm := range byKey {
		sort.Slice(adm, func(i, j int) bool { return adm[i].s < adm[j].s })
		best := excess{}
		switch z.alg {
		case "token_bucket", "sliding_window_log":
			for i := range adm {
				maxE := adm[i].e
				for j := i; j < len(adm) && adm[j].s-adm[i].s < horizon; j++ {
					if adm[j].e > maxE {
						maxE = adm[j].e
					}
					span := maxE - adm[i].s
					bound := z.capacity() + z.rate()*span.Seconds()
					if z.alg == "sliding_window_log" {
						if span >= z.period {
							break
						}
						bound = z.quota
					}
					if over := float64(j-i+1) - bound; over > best.over {
						best = excess{over, fmt.Sprintf("zone %s key %s: %d admitted in %.2f s", z.name, k, j-i+1, span.Seconds()), adm[i].s, maxE}
					}
				}
			}
		case "fixed_window", "sliding_window_counter":
			in := map[int64]int{}
			for _, x := range adm {
				if w := ev.t.windowOf(x.s, z.period); w == ev.t.windowOf(x.e, z.period) {
					in[w]++
				}
			}
			for w, n := range in {
				if over := float64(n) - z.quota; over > best.over {
					a := time.Unix(0, w*int64(z.period)).Sub(ev.t.start)
					best = excess{over, fmt.Sprintf("zone %s key %s: %d admitted in one window of %v", z.name, k, n, z.period), a, a + z.period}
				}
			}
		}
		if best.over > 0 && ev.t.restartsIn(g, best.from-time.Second, best.to) > 0 {
			// Redis started empty: its own bucket afresh, not the policy's doing.
			continue
		}
		if e := ev.excess[r.policy]; best.over > e.over {
			best.what = g.name + ": " + best.what
			ev.excess[r.policy] = best
		}
	}
}
