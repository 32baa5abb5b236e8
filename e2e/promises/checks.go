package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"time"
)

// The slack of the documented bounds this file checks.
const (
	// recoveryBound is README's "After an outage": once Redis answers
	// again, its counters decide every request within the breaker's
	// backoff plus twice the decision timeout, 1.2 s with the defaults.
	recoveryBound = 1200 * time.Millisecond
	// shapeSlack absorbs the scheduling jitter between the instant a
	// shaping limit lets a request go and its arrival upstream: e2e/shaping
	// allows 100 ms for one host; here eight processes share two cores
	// with the load, and a stall of 180 ms was seen to bunch the arrivals
	// of every host at once.
	shapeSlack = 250 * time.Millisecond
	// horizon bounds the intervals checked, whose count is quadratic in
	// the admissions: an excess shows in a shorter interval unless it
	// accrues by less than a capacity a minute.
	horizon = 60 * time.Second
	eps     = 1e-9
	// staleAnswers is how many answers per host, route and fault may come
	// from the failure policy after the recovery bound because the fault
	// dropped or spoilt a connection idle in the pool of the route's
	// store (a Traefik middleware's, a sluicehttp middleware's), which
	// fails the first decision written to it (traefikplugin/README: a
	// decision that may have run is not sent again; e2e/outage's
	// -dropped 2 per endpoint). The 30-minute run saw 88 in 105,700
	// answers not from Redis, one of them after a pause.
	staleAnswers = 2
	// slowAnswer is how long a decision that timed out took: the
	// decision timeout (100 ms by default) less a little for the clock.
	slowAnswer = 95 * time.Millisecond
	// slowBudget is how many decisions of a host may time out while no
	// fault breaks its way to Redis (or 0.5 % of its answers, if more).
	slowBudget = 5
)

// violation is one broken promise and what shows it.
type violation struct {
	check    string
	msg      string
	recs     []*rec          // the answers that show it
	arrivals []time.Duration // or the upstream's arrivals
	from, to time.Duration
	groups   []*group
}

// figure is one line of a check's figures.
type figure struct {
	check string
	text  string
}

// evaluation accumulates the verdicts of the checks.
type evaluation struct {
	t       *topology
	sel     map[string]bool
	vs      []*violation
	figs    []figure
	checked map[string]int     // intervals, keys or answers checked, by check
	worst   map[string]float64 // the largest count over bound, by check
	excess  map[string]excess  // the most admitted beyond a bound, by failure policy

	penaltyFig                         penaltyFigures
	costFig                            costFigures
	slow                               map[*host][]*rec // slowDecisions
	uncountedChecked, uncountedExcused int              // the steady keys' answers checked, and left out for a fault or stall
}

func (ev *evaluation) want(c string) bool { return len(ev.sel) == 0 || ev.sel[c] }

func (ev *evaluation) add(v *violation) {
	ev.vs = append(ev.vs, v)
}

func (ev *evaluation) fig(check, format string, args ...interface{}) {
	ev.figs = append(ev.figs, figure{check, fmt.Sprintf(format, args...)})
}

// ratio notes count against bound for check's worst.
func (ev *evaluation) ratio(check string, count, bound float64) {
	if w, ok := ev.worst[check]; bound > 0 && (!ok || count/bound > w) {
		ev.worst[check] = count / bound
	}
}

// evaluate runs the selected checks over the run's answers.
func (t *topology) evaluate(sel map[string]bool) ([]*violation, []figure) {
	ev := &evaluation{t: t, sel: sel, checked: map[string]int{}, worst: map[string]float64{}, excess: map[string]excess{}}
	recs := t.rc.all()
	ev.slow = slowDecisions(recs)
	// The answers of the workload's routes, by group and route.
	by := map[*group]map[*route][]*rec{}
	for _, x := range recs {
		if by[x.g] == nil {
			by[x.g] = map[*route][]*rec{}
		}
		by[x.g][x.r] = append(by[x.g][x.r], x)
	}
	for _, rs := range by {
		for _, xs := range rs {
			sort.SliceStable(xs, func(i, j int) bool { return xs[i].s < xs[j].s })
		}
	}
	if ev.want("answers") {
		ev.answers(recs)
	}
	for _, g := range t.groupList {
		for _, r := range g.routes {
			if r.name == "plb" || strings.HasPrefix(r.name, "d") {
				continue
			}
			xs := by[g][r]
			for _, z := range r.zones {
				if z.inflight > 0 || z.maxDelay > 0 {
					continue
				}
				if z.penalty > 0 && ev.want("penalty") {
					ev.penalty(g, r, z, xs, nil)
					if r.policy == "fallback" {
						for _, h := range g.hosts {
							ev.penalty(g, r, z, xs, h)
						}
					}
				}
				if z.costHeader != "" || z.costBytes {
					// The bound holds for the costs charged.
					if ev.want("cost") {
						ev.costBound(g, r, z, xs, nil)
						if r.policy == "fallback" {
							for _, h := range g.hosts {
								ev.costBound(g, r, z, xs, h)
							}
						}
					}
					continue
				}
				if z.countStatus != nil {
					// The bound holds for the counted responses.
					if ev.want("counted") {
						ys := countedOnly(z, xs)
						ev.zoneBound("counted", g, r, z, ys, nil)
						if r.policy == "fallback" {
							for _, h := range g.hosts {
								ev.zoneBound("counted", g, r, z, ys, h)
							}
						}
					}
					continue
				}
				check := "bound"
				if z.lease > 0 {
					check = "lease"
				}
				if ev.want(check) {
					ev.zoneBound(check, g, r, z, xs, nil)
					if !r.probe {
						ev.measureExcess(g, r, z, xs)
					}
				}
				if r.policy == "fallback" && ev.want("fallback") {
					for _, h := range g.hosts {
						if hasRoute(h, r) {
							ev.zoneBound("fallback", g, r, z, xs, h)
						}
					}
				}
			}
			if r.costs && ev.want("cost") {
				ev.debt(g, r, xs)
				ev.streams(g, r, xs)
			}
			if r.steady > 0 && ev.want("counted") {
				ev.uncounted(g, r, xs)
			}
			if strings.HasPrefix(r.path, "/count/") && (ev.want("slots") || ev.want("solo") || ev.want("shaping")) {
				ev.upstream(g, r, xs)
			}
		}
		if ev.want("shared") {
			ev.shared(g, by[g])
		}
	}
	if ev.want("charge") || ev.want("defect1") {
		ev.charges(by)
	}
	if ev.want("headers") {
		ev.headers()
	}
	if ev.want("recovery") {
		ev.recovery(recs)
	}
	for _, p := range []string{"allow", "fallback", "deny"} {
		if e, ok := ev.excess[p]; ok {
			ev.fig("excess", "%s: at most %.1f admitted beyond the bound in any interval (%s, %.2fs..%.2fs), all answers counted", p, e.over, e.what, e.from.Seconds(), e.to.Seconds())
		} else if ev.want("bound") {
			ev.fig("excess", "%s: nothing admitted beyond the bound, all answers counted", p)
		}
	}
	if ev.want("penalty") {
		f := ev.penaltyFig
		ev.fig("penalty", "%d penalties whose start the answers bound, %d answers within them checked held out with Retry-After and t the time left; %d refusals followed by another with nothing admitted between, at most %.3f s apart",
			f.penalties, f.held, f.runs, f.longest.Seconds())
	}
	if ev.want("counted") {
		ev.fig("counted", "%d answers to keys answered only 200 checked never refused (%d more by Redis near a fault or stall left out)", ev.uncountedChecked, ev.uncountedExcused)
	}
	if ev.want("cost") {
		f := ev.costFig
		ev.fig("cost", "%d admissions held to B + r·T + the debt of the requests in progress, costs settled by the docs' rules (%d of them stated in a stream's trailer; %d streams cut short after the first event (%d by the upstream, the others by their client), charged at least the estimate, %d of which reached it event by event, the first at most %.3f s after the request (%d near a stall left out); %d hostile: missing, NaN, infinite, negative, malformed or above the capacity; %d whose settlement a fault may have lost counted at the lesser of estimate and cost); the debt key: %d refusals' Retry-After and t checked against the repayment (%d short of the estimate for certain, the deepest debt %.1f), %d admissions after a Retry-After, %d admissions' Remaining checked against the estimate",
			f.admitted, f.trailers, f.left, f.cut, f.streams, f.slowestStream.Seconds(), f.streamsNear, f.hostile, f.unsure, f.debts, f.held, f.worstDebt, f.released, f.remaining)
	}
	for _, c := range checkNames {
		n, ok := ev.checked[c]
		if !ok {
			continue
		}
		if w, ok := ev.worst[c]; ok {
			ev.fig(c, "%d checked; the most against the bound, in any interval: %.3f of it", n, w)
		} else {
			ev.fig(c, "%d checked", n)
		}
	}
	return ev.vs, ev.figs
}

// answers checks that no request failed: no 5xx, no transport error but
// around a reload of the host (Caddy's server swap may drop a
// connection).
func (ev *evaluation) answers(recs []*rec) {
	n := map[class]int{}
	for _, x := range recs {
		n[x.cls]++
		if x.cls != classFailed || strings.HasPrefix(x.r.name, "d") {
			continue
		}
		near := false
		for _, rl := range ev.t.reloads {
			if rl.h == x.h && x.e >= rl.at-time.Second && x.s <= rl.done+2*time.Second {
				near = true
			}
		}
		if near && x.code == 0 {
			continue
		}
		ev.add(&violation{check: "answers", msg: fmt.Sprintf("a request failed: %s", x.err), recs: []*rec{x}, from: x.s, to: x.e, groups: []*group{x.g}})
	}
	ev.checked["answers"] = len(recs)
	ev.fig("answers", "%d answers: %d from Redis, %d from the fallback, %d from the failure policy, %d clients hung up, %d failed",
		len(recs), n[classRedis], n[classFallback], n[classPolicy], n[classHungUp], n[classFailed])
}

// restartsIn counts the times g's Redis lost its state (killed, to start
// again empty) within [a, b].
func (t *topology) restartsIn(g *group, a, b time.Duration) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, r := range t.restarts {
		if r.cluster == g.cluster && r.at >= a && r.at <= b {
			n++
		}
	}
	return n
}

// keyOf is the key a request of route r with X-Key key has in zone z.
func keyOf(z *zone, key string) string {
	if z.header == "" {
		return "g"
	}
	return key
}

// zoneBound checks the admissions of zone z (route r, group g) decided
// in Redis (h nil) or by h's local fallback against the algorithm's
// bound, per key: token_bucket B + r·T (plus, with a lease, the
// instances' leases n·k), fixed_window its quota per window,
// sliding_window_log its quota in any period, sliding_window_counter
// prev·(1 − elapsed/period) + cur ≤ quota; each Redis started empty
// within an interval adds a capacity. The fallback's bound is the same
// with the instance's share.
func (ev *evaluation) zoneBound(check string, g *group, r *route, z *zone, xs []*rec, h *host) {
	cls := classRedis
	quota, capacity := z.quota, z.capacity()
	if h != nil {
		cls = classFallback
		n := float64(r.instances(g))
		quota /= n
		capacity /= n
		if capacity < 1 {
			capacity = 1
		}
		if z.burst == 0 && quota < 1 {
			quota = 1
		}
	}
	byKey := map[string][]*rec{}
	for _, x := range xs {
		if x.cls != cls || !x.admitted() || (h != nil && x.h != h) {
			continue
		}
		k := keyOf(z, x.key)
		byKey[k] = append(byKey[k], x)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	who := g.name
	if h != nil {
		who = h.name + "'s fallback"
	}
	extraLease := 0.0
	if z.lease > 0 && h == nil {
		extraLease = float64(len(g.hosts)) * z.lease
	}
	for _, k := range keys {
		adm := byKey[k]
		ev.checked[check] += len(adm)
		restarts := func(a, b time.Duration) float64 {
			if h != nil {
				return 0
			}
			return float64(ev.t.restartsIn(g, a, b))
		}
		switch z.alg {
		case "token_bucket", "leaky_bucket":
			rate := quota / z.period.Seconds()
			best := (*violation)(nil)
			bestOver := 0.0
			for i := 0; i < len(adm); i++ {
				maxE := adm[i].e
				for j := i; j < len(adm) && adm[j].s-adm[i].s < horizon; j++ {
					if adm[j].e > maxE {
						maxE = adm[j].e
					}
					span := (maxE - adm[i].s).Seconds()
					base := capacity + rate*span
					bound := base + extraLease + capacity*restarts(adm[i].s, maxE)
					count := float64(j - i + 1)
					ev.ratio(check, count, bound)
					if count > bound+eps && count-bound > bestOver {
						bestOver = count - bound
						best = &violation{check: check, recs: append([]*rec(nil), adm[i:j+1]...), from: adm[i].s, to: maxE, groups: []*group{g},
							msg: fmt.Sprintf("%s: zone %s (%s, capacity %v, %v/s), key %s: %d admitted between %.3fs and %.3fs (%.3f s), more than the bound %.2f = %.2f + %.2f·%.3f%s",
								who, z.name, z.alg, capacity, rate, k, j-i+1, adm[i].s.Seconds(), maxE.Seconds(), span, bound, capacity, rate, span, extraText(extraLease, capacity*restarts(adm[i].s, maxE)))}
					}
				}
			}
			if best != nil {
				ev.add(best)
			}
		case "fixed_window", "sliding_window_counter":
			ev.windowBound(check, g, z, k, who, adm, quota, restarts)
		case "sliding_window_log":
			best := (*violation)(nil)
			for i := 0; i < len(adm); i++ {
				maxE := adm[i].e
				for j := i; j < len(adm) && adm[j].s-adm[i].s < z.period; j++ {
					if adm[j].e > maxE {
						maxE = adm[j].e
					}
					if maxE-adm[i].s >= z.period {
						break
					}
					bound := quota * (1 + restarts(adm[i].s, maxE))
					count := float64(j - i + 1)
					ev.ratio(check, count, bound)
					if count > bound+eps && (best == nil || j-i+1 > len(best.recs)) {
						best = &violation{check: check, recs: append([]*rec(nil), adm[i:j+1]...), from: adm[i].s, to: maxE, groups: []*group{g},
							msg: fmt.Sprintf("%s: zone %s (sliding_window_log %v per %v), key %s: %d admitted between %.3fs and %.3fs, within one period, more than %v",
								who, z.name, quota, z.period, k, j-i+1, adm[i].s.Seconds(), maxE.Seconds(), bound)}
					}
				}
			}
			if best != nil {
				ev.add(best)
			}
		}
	}
}

func extraText(lease, restarts float64) string {
	s := ""
	if lease > 0 {
		s += fmt.Sprintf(" + %.0f (the instances' leases)", lease)
	}
	if restarts > 0 {
		s += fmt.Sprintf(" + %.0f (Redis started empty)", restarts)
	}
	return s
}

// windowOf returns the index of the period-long window (aligned to the
// Unix epoch) that holds run instant d.
func (t *topology) windowOf(d, period time.Duration) int64 {
	return t.start.Add(d).UnixNano() / int64(period)
}

// windowBound checks a fixed window's and a sliding window counter's
// admissions per window: an admission is in a window for certain when
// it was sent and answered within it (or, for a fixed window, when its
// X-RateLimit-Reset names the window's end); at most quota per window;
// for a counter, each admission k certainly in window w needs
// prev·(1 − elapsed/period) + (the admissions of w certainly before k) +
// 1 ≤ quota, prev the admissions certainly in w−1 and elapsed the latest
// k may have been decided at.
func (ev *evaluation) windowBound(check string, g *group, z *zone, k, who string, adm []*rec, quota float64, restarts func(a, b time.Duration) float64) {
	t := ev.t
	p := z.period
	in := map[int64][]*rec{}
	for _, x := range adm {
		w0, w1 := t.windowOf(x.s, p), t.windowOf(x.e, p)
		switch {
		case w0 == w1:
			in[w0] = append(in[w0], x)
		case z.alg == "fixed_window" && x.zone == z.name:
			if w, ok := windowByReset(x.reset, p); ok {
				in[w] = append(in[w], x)
			}
		}
	}
	startOf := func(w int64) time.Duration { return time.Unix(0, w*int64(p)).Sub(t.start) }
	ws := make([]int64, 0, len(in))
	for w := range in {
		ws = append(ws, w)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i] < ws[j] })
	for _, w := range ws {
		xs := in[w]
		a, b := startOf(w), startOf(w+1)
		bound := quota * (1 + restarts(a, b))
		ev.ratio(check, float64(len(xs)), bound)
		if float64(len(xs)) > bound+eps {
			ev.add(&violation{check: check, recs: xs, from: a, to: b, groups: []*group{g},
				msg: fmt.Sprintf("%s: zone %s (%s %v per %v), key %s: %d admitted in the window %.3fs..%.3fs, more than %v", who, z.name, z.alg, quota, p, k, len(xs), a.Seconds(), b.Seconds(), bound)})
			continue
		}
		if z.alg != "sliding_window_counter" || restarts(startOf(w-1), b) > 0 {
			continue
		}
		prev := float64(len(in[w-1]))
		for i, x := range xs {
			before := 0
			for _, y := range xs[:i] {
				if y.e < x.s {
					before++
				}
			}
			elapsed := float64(x.e-a) / float64(p)
			if elapsed > 1 {
				elapsed = 1
			}
			est := prev*(1-elapsed) + float64(before) + 1
			ev.ratio(check, est, quota)
			if est > quota+eps {
				shown := append(append([]*rec(nil), in[w-1]...), xs[:i+1]...)
				ev.add(&violation{check: check, recs: shown, from: startOf(w - 1), to: x.e, groups: []*group{g},
					msg: fmt.Sprintf("%s: zone %s (sliding_window_counter %v per %v), key %s: request %d admitted with %d admitted before it in its window and %v in the previous, at elapsed ≤ %.3f: %.3f·(1 − %.3f) + %d + 1 = %.3f > %v",
						who, z.name, quota, p, k, x.id, before, prev, elapsed, prev, elapsed, before, est, quota)})
				break
			}
		}
	}
}

// windowByReset returns the index of the fixed window (of period p, a
// whole number of seconds of at least 2) whose answer carried
// X-RateLimit-Reset reset: the window's end rounded up to a whole second,
// which the sum of the decision's instant and its reset, both rounded,
// may put a second late.
func windowByReset(reset int64, p time.Duration) (int64, bool) {
	sec := int64(p / time.Second)
	for _, end := range []int64{reset, reset - 1} {
		if end%sec == 0 {
			return end/sec - 1, true
		}
	}
	return 0, false
}

// windowIs reports whether X-RateLimit-Reset reset names the fixed window
// (of period p) ending at the Unix second end.
func windowIs(reset int64, p time.Duration, end int64) bool {
	w, ok := windowByReset(reset, p)
	return ok && (w+1)*int64(p/time.Second) == end
}

// counts is e2e/backend's /_counts answer.
type counts struct {
	Arrivals []int64    `json:"arrivals"`
	Stalls   [][2]int64 `json:"stalls"`
}

// upstream checks what reached the backend through an upstream route:
// for max_in_flight zones, at most the limit in progress at once (each
// request held exactly r.hold there from its arrival), twice the limit
// within a hold of Redis starting empty (its leases lost, on a solo
// route too: one instance with fallback local never has more through an
// outage, but a Redis restarted empty is none it sees); for shaping zones, at most
// 1 + r·(T + slack) arrivals (leaky_bucket) or B + r·(T + slack)
// (token_bucket with max_delay) in any interval T, a capacity more per
// Redis started empty.
func (ev *evaluation) upstream(g *group, r *route, xs []*rec) {
	t := ev.t
	z := r.zones[0]
	keys := map[string][]*rec{}
	for _, x := range xs {
		keys[x.key] = append(keys[x.key], x)
	}
	for key, kx := range keys {
		hold := holdOf(r, key)
		path := strings.TrimSuffix(pathOf(r, key, 0), "?sleep="+hold.String())
		_, body, err := fetch("GET", "http://"+t.backend+"/_counts?path="+url.QueryEscape(path))
		var c counts
		if err == nil {
			err = json.Unmarshal([]byte(body), &c)
		}
		if err != nil {
			ev.add(&violation{check: "slots", msg: fmt.Sprintf("reading the backend's counts of %s: %v", path, err), groups: []*group{g}})
			continue
		}
		arr := make([]time.Duration, len(c.Arrivals))
		for i, a := range c.Arrivals {
			arr[i] = time.Unix(0, a).Sub(t.start)
		}
		sort.Slice(arr, func(i, j int) bool { return arr[i] < arr[j] })
		// The longest stall of this process or the backend's in [a, b].
		stalled := func(a, b time.Duration) time.Duration {
			most := t.stalls.longest(a, b)
			for _, st := range c.Stalls {
				at := time.Unix(0, st[0]).Sub(t.start)
				if d := overlap(at, at+time.Duration(st[1]), a, b); d > most {
					most = d
				}
			}
			return most
		}
		if z.inflight > 0 {
			check := "slots"
			if r.solo {
				check = "solo"
			}
			if !ev.want(check) {
				continue
			}
			ev.checked[check] += len(arr)
			for i := range arr {
				// Requests in progress at arr[i]: those arrived within a hold before.
				n := 0
				for j := i; j >= 0 && arr[i]-arr[j] < hold-5*time.Millisecond; j-- {
					n++
				}
				bound := float64(z.inflight)
				if t.restartsIn(g, arr[i]-hold-200*time.Millisecond, arr[i]) > 0 {
					bound *= 2
				}
				ev.ratio(check, float64(n), bound)
				if float64(n) > bound {
					what := ""
					if r.solo {
						what = ", one instance with fallback local and instances 1, which docs/redis.md says never has more through an outage"
					}
					ev.add(&violation{check: check, groups: []*group{g}, arrivals: arr[i-n+1 : i+1], recs: near(kx, arr[i]-hold, arr[i]+hold),
						from: arr[i-n+1], to: arr[i],
						msg: fmt.Sprintf("%s: zone %s (max_in_flight %d%s), key %s: the upstream had %d requests in progress at %.3fs (each held %v from its arrival), more than %v", g.name, z.name, z.inflight, what, key, n, arr[i].Seconds(), hold, bound)})
					break
				}
			}
			continue
		}
		if !ev.want("shaping") {
			continue
		}
		ev.checked["shaping"] += len(arr)
		rate := z.rate()
		base := 1.0
		if z.alg == "token_bucket" {
			base = z.capacity()
		}
		var best *violation
		for i := range arr {
			for j := i; j < len(arr) && arr[j]-arr[i] < horizon; j++ {
				stall := stalled(arr[i]-z.maxDelay-time.Second, arr[j])
				span := (arr[j] - arr[i] + shapeSlack + stall).Seconds()
				// Redis started empty admits afresh while the requests
				// it held before still leave: a capacity, what max_delay
				// lends, and one more.
				bound := base + rate*span + (z.capacity()+rate*z.maxDelay.Seconds()+1)*float64(t.restartsIn(g, arr[i]-z.maxDelay-time.Second, arr[j]))
				count := float64(j - i + 1)
				ev.ratio("shaping", count, bound)
				if count > bound+eps && (best == nil || j-i+1 > len(best.arrivals)) {
					best = &violation{check: "shaping", groups: []*group{g}, arrivals: arr[i : j+1], recs: near(kx, arr[i]-z.maxDelay-time.Second, arr[j]),
						from: arr[i], to: arr[j],
						msg: fmt.Sprintf("%s: zone %s (%s %v/s, capacity %v, max_delay %v), key %s: the upstream saw %d requests between %.3fs and %.3fs, more than %.2f = %v + %v·(%.3f s + %v slack + %v the machine stalled)",
							g.name, z.name, z.alg, rate, z.capacity(), z.maxDelay, key, j-i+1, arr[i].Seconds(), arr[j].Seconds(), bound, base, rate, (arr[j] - arr[i]).Seconds(), shapeSlack, stall)}
				}
			}
		}
		if best != nil {
			ev.add(best)
		}
	}
}

// near returns the answers of xs whose requests were in progress at some
// instant of [a, b].
func near(xs []*rec, a, b time.Duration) []*rec {
	var out []*rec
	for _, x := range xs {
		if x.e >= a && x.s <= b {
			out = append(out, x)
		}
	}
	return out
}

// shared checks that a quota shared by a group's hosts is exact: in a
// window of the fixed-window route fw in which Redis refused a request of
// a key, and in which every answer of the key came from Redis with no
// fault on the group's way, Redis admitted exactly the quota over all
// hosts (fewer means a request charged twice or a lost count).
func (ev *evaluation) shared(g *group, by map[*route][]*rec) {
	t := ev.t
	var r *route
	for _, x := range g.routes {
		if x.name == "fw" {
			r = x
		}
	}
	z := r.zones[0]
	type win struct {
		adm, rej []*rec
		dirty    bool
	}
	wins := map[string]map[int64]*win{}
	get := func(k string, w int64) *win {
		if wins[k] == nil {
			wins[k] = map[int64]*win{}
		}
		if wins[k][w] == nil {
			wins[k][w] = &win{}
		}
		return wins[k][w]
	}
	p := z.period
	for _, x := range by[r] {
		if x.cls != classRedis {
			// An answer not from Redis may have been charged: its windows are not exact.
			for w := t.windowOf(x.s-200*time.Millisecond, p); w <= t.windowOf(t.fateEnd(x)+200*time.Millisecond, p); w++ {
				get(x.key, w).dirty = true
			}
			continue
		}
		w, ok := windowByReset(x.reset, p)
		if !ok {
			continue
		}
		if x.admitted() {
			get(x.key, w).adm = append(get(x.key, w).adm, x)
		} else {
			get(x.key, w).rej = append(get(x.key, w).rej, x)
		}
	}
	startOf := func(w int64) time.Duration { return time.Unix(0, w*int64(p)).Sub(t.start) }
	for k, ws := range wins {
		for w, v := range ws {
			if len(v.rej) == 0 || v.dirty {
				continue
			}
			a, b := startOf(w), startOf(w+1)
			if t.faultNear(g, a-1500*time.Millisecond, b) || t.restartsIn(g, a, b) > 0 {
				continue
			}
			ev.checked["shared"]++
			if float64(len(v.adm)) < z.quota-eps {
				ev.add(&violation{check: "shared", groups: []*group{g}, recs: append(append([]*rec(nil), v.adm...), v.rej...), from: a, to: b,
					msg: fmt.Sprintf("%s: zone %s (fixed_window %v per %v), key %s: in the window %.3fs..%.3fs Redis refused %d requests after admitting %d over %s, not the quota %v",
						g.name, z.name, z.quota, p, k, a.Seconds(), b.Seconds(), len(v.rej), len(v.adm), hostNames(g.hosts), z.quota)})
			}
		}
	}
}

// faultNear reports whether a fault broke any of g's hosts' way to Redis
// at some instant of [a, b].
func (t *topology) faultNear(g *group, a, b time.Duration) bool {
	for _, f := range t.faults {
		fa, fb := f.window()
		if fb < a || fa > b {
			continue
		}
		for _, h := range t.affects(f) {
			if h.group == g {
				return true
			}
		}
	}
	return false
}

// charges checks that no request was charged twice: what Redis held for
// a key of the charge zone (a fixed window) near its window's end is at
// least the admissions Redis answered in that window and at most those
// plus the answers whose fate is unknown (the failure policy's: a
// timeout or a dropped reply after the script may have run). On the
// Cluster this is defect 1's check.
func (ev *evaluation) charges(by map[*group]map[*route][]*rec) {
	t := ev.t
	chargeMu.Lock()
	reads := append([]*chargeRead(nil), chargeReads...)
	chargeMu.Unlock()
	for _, cr := range reads {
		check := "charge"
		if cr.g.cluster {
			check = "defect1"
		}
		if !ev.want(check) {
			continue
		}
		var r *route
		for _, x := range cr.g.routes {
			if x.name == "charge" {
				r = x
			}
		}
		p := r.zones[0].period
		a := time.Unix(cr.end, 0).Add(-p).Sub(t.start)
		b := time.Unix(cr.end, 0).Sub(t.start)
		if t.restartsIn(cr.g, a-time.Second, b) > 0 {
			continue
		}
		count := cr.count
		switch ws := windowStart(cr.start); {
		case cr.absent || ws < cr.end-int64(p/time.Second):
			// No state, or an older window's: nothing charged in this one.
			count = 0
		case ws > cr.end-int64(p/time.Second):
			continue
		}
		var adm, unknown, inFlight []*rec
		for _, x := range by[cr.g][r] {
			if x.key != cr.key || t.fateEnd(x) < a || x.s > b {
				continue
			}
			switch {
			case x.cls == classRedis && x.admitted() && windowIs(x.reset, p, cr.end):
				adm = append(adm, x)
				if x.e > cr.at {
					inFlight = append(inFlight, x)
				}
			case x.cls == classPolicy || x.cls == classFailed || x.cls == classFallback:
				unknown = append(unknown, x)
			}
		}
		ev.checked[check]++
		shown := append(append([]*rec(nil), adm...), unknown...)
		sort.Slice(shown, func(i, j int) bool { return shown[i].s < shown[j].s })
		switch {
		case count > float64(len(adm)+len(unknown))+eps:
			ev.add(&violation{check: check, groups: []*group{cr.g}, recs: shown, from: a, to: b,
				msg: fmt.Sprintf("%s: key %s, window ending %d: Redis counts %v charges, more than the %d admissions it answered plus the %d answers of unknown fate: a request charged twice",
					cr.g.name, cr.key, cr.end, count, len(adm), len(unknown))})
		case count < float64(len(adm)-len(inFlight))-eps:
			ev.add(&violation{check: check, groups: []*group{cr.g}, recs: shown, from: a, to: b,
				msg: fmt.Sprintf("%s: key %s, window ending %d: Redis counts %v charges, fewer than the %d admissions it answered before it was read: an admission not charged",
					cr.g.name, cr.key, cr.end, count, len(adm)-len(inFlight))})
		}
	}
}

// fateEnd is the latest instant at which the command of request x may
// have run in Redis: its answer, or, when a fault held the command, the
// end of a pause (Redis runs what it read when it resumes) or the
// latency's delay past the answer (the command arrives after the host
// gave up on it).
func (t *topology) fateEnd(x *rec) time.Duration {
	end := x.e
	for _, f := range t.faults {
		a, b := f.window()
		if b < x.s || a > x.e {
			continue
		}
		hit := false
		for _, h := range t.affects(f) {
			hit = hit || h == x.h
		}
		if !hit {
			continue
		}
		switch f.kind {
		case "pause":
			if b > end {
				end = b
			}
		case "latency":
			if d := x.e + time.Duration(f.param*1.25+50)*time.Millisecond; d > end {
				end = d
			}
		}
	}
	return end
}

// headers turns the probes' verdicts into violations.
func (ev *evaluation) headers() {
	probeMu.Lock()
	defer probeMu.Unlock()
	done, inconclusive := 0, 0
	for _, p := range probeResults {
		// A fault on the group's way may charge a probe's request twice
		// (defect 1) or leave it undecided: the probe cannot tell.
		if p.inconclusive || ev.t.faultNear(p.g, p.recs[0].s, p.recs[len(p.recs)-1].e) {
			inconclusive++
			continue
		}
		done++
		if p.problem != "" {
			ev.add(&violation{check: "headers", groups: []*group{p.g}, recs: p.recs, from: p.recs[0].s, to: p.recs[len(p.recs)-1].e,
				msg: fmt.Sprintf("%s: zone %s, quiet key %s: %s", p.g.name, p.r.zones[0].name, p.key, p.problem)})
		}
	}
	ev.checked["headers"] = done
	ev.fig("headers", "%d conclusive probes of quiet keys (Remaining, Retry-After, Reset) over every algorithm and group, and %d more that a fault made inconclusive", done, inconclusive)
}

// recovery checks that every answer not from Redis (the failure policy's
// or the fallback's) came while a fault broke its host's way to Redis or
// within recoveryBound after that fault ended, and measures how long
// after each fault the last such answer came.
func (ev *evaluation) recovery(recs []*rec) {
	t := ev.t
	type win struct {
		a, b time.Duration
		f    *fault
	}
	wins := map[*host][]win{}
	for _, f := range t.faults {
		a, b := f.window()
		for _, h := range t.affects(f) {
			wins[h] = append(wins[h], win{a, b, f})
		}
	}
	// A decision Redis did not answer within the timeout (the policy's
	// answer came after it) while no fault broke the host's way is the
	// documented failure policy too, as is the breaker it may open: an
	// outage seen, its recovery bounded as a fault's. Unless this process
	// or Redis itself stalled meanwhile (Redis answered PING late), a host
	// may see a few (a busy machine), not many: at most slowBudget or
	// 0.5 % of its answers.
	slow := map[*host][]*rec{}
	answers := map[*host]int{}
	var seen []win
	var seenBy []*host
	for _, x := range recs {
		answers[x.h]++
		if (x.cls == classPolicy || x.cls == classFallback) && x.e-x.s >= slowAnswer && !strings.HasPrefix(x.r.name, "d") {
			// An outage seen, from which the breaker recovers as from a
			// fault; counted against the host unless it came with a
			// fault's or the machine stalled meanwhile.
			seen, seenBy = append(seen, win{x.s, x.e, nil}), append(seenBy, x.h)
			inFault := false
			for _, w := range wins[x.h] {
				if w.f != nil && x.e >= w.a && x.s <= w.b+recoveryBound+t.stalled(x.h, w.b, x.s) {
					inFault = true
				}
			}
			if !inFault && t.stalled(x.h, x.s, x.e) == 0 {
				slow[x.h] = append(slow[x.h], x)
			}
		}
	}
	for i, w := range seen {
		wins[seenBy[i]] = append(wins[seenBy[i]], w)
	}
	nSlow := 0
	for h, xs := range slow {
		nSlow += len(xs)
		if budget := answers[h] / 200; len(xs) > slowBudget && len(xs) > budget {
			ev.add(&violation{check: "recovery", groups: []*group{h.group}, recs: xs, from: xs[0].s, to: xs[len(xs)-1].e,
				msg: fmt.Sprintf("%s: %d decisions of %s timed out while no fault broke its way to Redis (of %d answers; at most %d or 0.5 %% may)", h.group.name, len(xs), h.name, answers[h], slowBudget)})
		}
	}
	worst := map[string]time.Duration{}
	var all []time.Duration
	last := map[*fault]time.Duration{}
	type staleKey struct {
		h *host
		r *route
		f *fault
	}
	stale := map[staleKey]int{}
	n, nStale := 0, 0
	for _, x := range recs {
		if x.cls != classPolicy && x.cls != classFallback || strings.HasPrefix(x.r.name, "d") {
			continue
		}
		n++
		explained := false
		for _, w := range wins[x.h] {
			if x.e >= w.a && x.s <= w.b+recoveryBound+t.stalled(x.h, w.b, x.s) {
				explained = true
				if d := x.s - w.b; w.f != nil && d > last[w.f] {
					last[w.f] = d
				}
			}
		}
		if explained {
			continue
		}
		// A connection a fault dropped while it was idle in the host's
		// pool may fail the first decision written to it afterwards: at
		// most staleAnswers per host and fault (e2e/outage's -dropped).
		var prev *fault
		pend := time.Duration(0)
		for _, w := range wins[x.h] {
			if w.f != nil && w.b < x.s && w.b >= pend {
				prev, pend = w.f, w.b
			}
		}
		if sk := (staleKey{x.h, x.r, prev}); prev != nil && stale[sk] < staleAnswers {
			stale[sk]++
			nStale++
			continue
		}
		ev.add(&violation{check: "recovery", groups: []*group{x.g}, recs: []*rec{x}, from: x.s, to: x.e,
			msg: fmt.Sprintf("%s: an answer from the %s while no fault broke %s's way to Redis in the %v before it", x.g.name, x.cls, x.h.name, recoveryBound)})
	}
	for f, d := range last {
		all = append(all, d)
		for _, h := range t.affects(f) {
			if d > worst[h.kind] {
				worst[h.kind] = d
			}
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	ev.checked["recovery"] = n
	if len(all) > 0 {
		ev.fig("recovery", "%d answers not from Redis, each within a fault or %v after it or after a decision that timed out, but %d from a connection a fault dropped, and %d decisions timed out without a fault; the last of them after a fault's end: median %v, max %v (Caddy %v, Traefik %v, Go service %v)",
			n, recoveryBound, nStale, nSlow, all[len(all)/2].Round(time.Millisecond), all[len(all)-1].Round(time.Millisecond),
			worst["caddy"].Round(time.Millisecond), worst["traefik"].Round(time.Millisecond), worst["service"].Round(time.Millisecond))
	}
}
