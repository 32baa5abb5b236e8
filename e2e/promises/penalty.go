package main

import (
	"fmt"
	"sort"
	"time"
)

// penaltyEps absorbs the difference between this process's clock and
// Redis's TIME, by which a penalty is timed.
const penaltyEps = 50 * time.Millisecond

// penalty checks zone z's penalty P on the answers xs of route r in group
// g: those the store decided (h nil), or h's local fallback, which holds
// out the keys it refuses by itself. A penalty starts with a refusal that
// is not in one, at some instant T0, and holds the key out over
// [T0, T0 + P). The answers show T0's bounds: a refusal x was decided in
// one, at most at x's answer; an admission z decided before x was not in
// it, so T0 is after z was sent. Hence, from the latest such z:
//   - held: every answer of a request sent after x's answer and answered
//     before z.s + P is a refusal, unless Redis started empty meanwhile;
//   - Retry-After and the RateLimit field's t of each refusal y are at
//     least the time left, z.s + P − y's answer, less a second (whole
//     seconds);
//   - released: the key's state is whole when its penalty ends (P is at
//     least the limit's full refill), so two refusals y1 and y2 with no
//     other answer in between that may have been an admission (any answer
//     not a refusal by the same store, over the time its command may have
//     run) are less than P apart: y2.s − y1.e ≤ P.
//
// Answers of the failure policy, and of another store than the one
// checked, prove nothing about it and are left out.
func (ev *evaluation) penalty(g *group, r *route, z *zone, xs []*rec, h *host) {
	t := ev.t
	cls := classRedis
	who := g.name + "'s store"
	if h != nil {
		cls, who = classFallback, h.name+"'s fallback"
	}
	mine := map[string][]*rec{}     // the store's answers, by key
	breakers := map[string][]*rec{} // the answers that may have been admissions of the store, by key
	for _, x := range xs {
		if h != nil && x.h != h {
			continue
		}
		k := keyOf(z, x.key)
		if x.cls == cls {
			mine[k] = append(mine[k], x)
		}
		if x.cls == cls && x.admitted() || h == nil && x.cls != cls || x.cls == classFailed || x.cls == classHungUp {
			breakers[k] = append(breakers[k], x)
		}
	}
	keys := make([]string, 0, len(mine))
	for k := range mine {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	p := z.penalty
	end := func(x *rec) time.Duration {
		if h != nil {
			return x.e
		}
		return t.fateEnd(x)
	}
	for _, k := range keys {
		as := mine[k]
		seen := map[*rec]bool{} // the admissions whose penalties were checked
		for i, x := range as {
			if x.admitted() {
				continue
			}
			// The latest admission answered before x was sent.
			var adm *rec
			for j := i - 1; j >= 0 && as[j].s > x.s-p; j-- {
				if as[j].admitted() && as[j].e < x.s {
					adm = as[j]
					break
				}
			}
			if adm == nil || seen[adm] {
				continue
			}
			seen[adm] = true
			until := adm.s + p
			if h == nil && t.restartsIn(g, adm.s, until) > 0 {
				continue
			}
			ev.penaltyFig.penalties++
			for _, y := range as[i:] {
				if y.s >= until {
					break
				}
				if y != x && (y.s < x.e || y.e >= until-penaltyEps) {
					continue
				}
				ev.penaltyFig.held++
				ev.checked["penalty"]++
				left := until - y.e
				what := ""
				switch {
				case y.admitted():
					what = "admitted"
				case float64(y.retry) < (left - time.Second).Seconds():
					what = fmt.Sprintf("refused with Retry-After %d s, less than the %.3f s left less a second", y.retry, left.Seconds())
				case y.zone != "" && float64(y.t) < (left-time.Second).Seconds():
					what = fmt.Sprintf("refused with the RateLimit field's t=%d, less than the %.3f s left less a second", y.t, left.Seconds())
				}
				if what != "" {
					shown := []*rec{adm, x}
					if y != x {
						shown = append(shown, y)
					}
					ev.add(&violation{check: "penalty", groups: []*group{g}, recs: shown, from: adm.s, to: y.e,
						msg: fmt.Sprintf("%s: zone %s (penalty %v), key %s: request %d, refused at %.3fs..%.3fs after admission %d sent at %.3fs, starts or falls in a penalty that lasts at least until %.3fs; request %d, sent at %.3fs and answered at %.3fs, was %s",
							who, z.name, p, k, x.id, x.s.Seconds(), x.e.Seconds(), adm.id, adm.s.Seconds(), until.Seconds(), y.id, y.s.Seconds(), y.e.Seconds(), what)})
					break
				}
			}
		}
		// Released: from each refusal, the last refusal before any other
		// answer that may have been an admission.
		bs := breakers[k]
		ends := make([]time.Duration, len(bs))
		for i, b := range bs {
			ends[i] = end(b)
		}
		var worst *violation
		longest := time.Duration(0)
		lo := 0 // bs[:lo] ended before the refusals from here were sent
		for i, y1 := range as {
			if y1.admitted() {
				continue
			}
			// The first breaker (by its send, as bs is sorted) that may
			// run after y1 was sent.
			for lo < len(bs) && ends[lo] <= y1.s {
				lo++
			}
			next := time.Duration(1 << 62)
			if lo < len(bs) {
				next = bs[lo].s
			}
			var y2 *rec
			for _, y := range as[i+1:] {
				if y.s >= next {
					break
				}
				if !y.admitted() && y.e < next {
					y2 = y
				}
			}
			if y2 == nil {
				continue
			}
			ev.penaltyFig.runs++
			if gap := y2.s - y1.e; gap > longest {
				longest = gap
				if gap > p+penaltyEps {
					var shown []*rec
					for _, y := range as[i:] {
						if y.s > y2.s {
							break
						}
						shown = append(shown, y)
					}
					worst = &violation{check: "penalty", groups: []*group{g}, recs: shown, from: y1.s, to: y2.e,
						msg: fmt.Sprintf("%s: zone %s (penalty %v, full again after %v), key %s: request %d, sent %.3f s after request %d was refused, was refused too, with nothing that may have been admitted in between: held out longer than the penalty",
							who, z.name, p, time.Duration(z.capacity()/z.rate()*float64(time.Second)), k, y2.id, gap.Seconds(), y1.id)}
				}
			}
		}
		if longest > ev.penaltyFig.longest {
			ev.penaltyFig.longest = longest
		}
		if worst != nil {
			ev.add(worst)
		}
	}
}

// penaltyFigures are the penalty check's figures.
type penaltyFigures struct {
	penalties int           // penalties whose start the answers bound
	held      int           // answers checked as held out
	runs      int           // refusals followed by another with no admission between
	longest   time.Duration // the longest time between two such refusals
}
