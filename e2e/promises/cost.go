package main

import (
	"fmt"
	"math"
	"math/rand"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"
)

// settleLag is how long after its body was read a request's settlement
// may still reach its store: the host settles once the handlers after
// sluice return, which may be after the client read the whole response,
// within the decision timeout (100 ms) and a little scheduling.
const settleLag = 150 * time.Millisecond

// hostileTokens are the X-Tokens-Used values the docs say leave the
// estimate charged ("" is no header at all), or count as the capacity
// (1e308, 60: above it).
var hostileTokens = []string{"NaN", "-5", "1e308", "Inf", "-Inf", "1e309", "x", " 7 z", "", "60"}

// respCost is what a request asks e2e/backend to say it cost: tokens as
// its X-Tokens-Used header (none when !header), or as the trailer of a
// stream of one server-sent event when trailer is set; bytes as its
// body's length (none, the body "ok" or the events, when negative). With
// leave, the answer is a stream of leaveEvents events, leaveEvery apart,
// with tokens in its header, cut short after the first (leftBytes): the
// client leaves it, or with upstreamCuts the upstream breaks it off.
type respCost struct {
	tokens       string
	header       bool
	trailer      bool
	leave        bool
	upstreamCuts bool
	bytes        int
}

// The stream a client leaves (respCost.leave): e2e/backend's events are
// "data: <i>\n\n", 9 bytes each.
const (
	leaveEvents = 3
	leaveEvery  = 400 * time.Millisecond
	leftBytes   = 9
)

// left reports whether x's answer was cut short after the first event
// (respCost.leave), by its client or by the upstream.
func (x *rec) left() bool { return x.rc != nil && x.rc.leave && x.admitted() }

// query is the query asking the backend for c ("" for nil).
func (c *respCost) query() string {
	if c == nil {
		return ""
	}
	var q []string
	switch {
	case c.trailer:
		q = append(q, "events=1")
	case c.leave:
		q = append(q, "events="+strconv.Itoa(leaveEvents), "every="+leaveEvery.String(), "at=start")
		if c.upstreamCuts {
			q = append(q, "cut=1")
		}
	}
	if c.header {
		q = append(q, "tokens="+url.QueryEscape(c.tokens))
	}
	if c.bytes >= 0 {
		q = append(q, "bytes="+strconv.Itoa(c.bytes))
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + strings.Join(q, "&")
}

func (c *respCost) String() string {
	s := "no X-Tokens-Used"
	if c.header {
		s = strconv.Quote(c.tokens)
	}
	switch {
	case c.trailer:
		return "a stream, tokens " + s + " in its trailer"
	case c.leave && c.upstreamCuts:
		return "a stream, tokens " + s + " in its header, broken off by the upstream after its first event"
	case c.leave:
		return "a stream, tokens " + s + " in its header, left after its first event"
	}
	return "tokens " + s + ", bytes " + strconv.Itoa(c.bytes)
}

// drawCost draws the cost a request asks of the upstream: X-Tokens-Used
// mostly a number from 0 to 16 (a few fractions, a few above the
// capacity), sometimes one of hostileTokens; a body of 0 to 3,000 bytes,
// sometimes more than the bytes limit's capacity; one request in five, a
// stream of one event (9 bytes) with X-Tokens-Used in its trailer; one in
// ten, a stream cut short after the first event (leave), by its client
// or, half of them, by the upstream. For
// the debt key (debt), more hostile values and larger costs, and no body
// but a stream's events: its bytes limit never refuses, so that each
// refusal is its tokens limit's.
func drawCost(rnd *rand.Rand, debt bool) *respCost {
	c := &respCost{header: true, bytes: rnd.Intn(3001)}
	if rnd.Intn(10) == 0 {
		c.bytes = 4000 + rnd.Intn(2001)
	}
	hostile, most := 5, 17
	if debt {
		hostile, most, c.bytes = 3, 31, 0
	}
	switch {
	case rnd.Intn(5) == 0:
		c.trailer, c.bytes = true, -1
	case rnd.Intn(8) == 0:
		c.leave, c.upstreamCuts, c.bytes = true, rnd.Intn(2) == 0, -1
	}
	switch {
	case rnd.Intn(hostile) == 0:
		c.tokens = hostileTokens[rnd.Intn(len(hostileTokens))]
		c.header = c.tokens != ""
	case rnd.Intn(8) == 0:
		c.tokens = strconv.Itoa(rnd.Intn(most)) + ".5"
	default:
		c.tokens = strconv.Itoa(rnd.Intn(most))
	}
	return c
}

// debtKey is the key of group g's requests that debtLoop sends.
func debtKey(g *group) string { return g.name + "-debt" }

// debtLoop sends route r's debt key in group g, one request at a time, to
// the group's hosts in turn, each asking a cost of drawCost: after an
// admission it waits 300 to 600 ms (the settlement has reached Redis by
// then), after a refusal its Retry-After and 500 ms more, so that the
// next request comes once the debt is repaid; until stop is closed.
func (t *topology) debtLoop(g *group, r *route, rnd *rand.Rand, stop <-chan struct{}) {
	for n := 0; ; n++ {
		x := t.do(&rec{g: g, h: g.hosts[n%len(g.hosts)], r: r, key: debtKey(g), rc: drawCost(rnd, true)}, 0, nil)
		wait := time.Duration(300+rnd.Intn(300)) * time.Millisecond
		if x.code == 429 && x.retry > 0 && x.retry <= 10 {
			wait = time.Duration(x.retry)*time.Second + 500*time.Millisecond
		}
		select {
		case <-stop:
			return
		case <-time.After(wait):
		}
	}
}

// settledCost is what the docs say x's request costs zone z once its
// response is known: the number its response states (X-Tokens-Used, or
// the bytes of its body), at most z's capacity; its estimate when the
// number is missing, malformed, NaN, infinite or negative; at least its
// estimate when its client left after the response began (x.left), the
// bytes counted being those it read, the least the host sent.
func settledCost(z *zone, x *rec) float64 {
	c := statedCost(z, x)
	if x.left() && c < z.cost {
		return z.cost
	}
	return c
}

// mostCost is the most that x's request may have cost zone z:
// settledCost, but for the bytes of a stream its client left, which count
// the events the host sent before it saw the client leave, at most all.
func mostCost(z *zone, x *rec) float64 {
	if z.costBytes && x.left() {
		return math.Max(z.cost, math.Min(z.capacity(), leaveEvents*leftBytes))
	}
	return settledCost(z, x)
}

// statedCost is the cost x's response states to z, bounded as the docs
// say (settledCost).
func statedCost(z *zone, x *rec) float64 {
	value := ""
	switch {
	case z.costBytes:
		value = strconv.FormatInt(x.n, 10)
	case x.rc != nil && x.rc.header:
		value = x.rc.tokens
	}
	c, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
	if err != nil || !(c >= 0) || math.IsInf(c, 0) {
		return z.cost
	}
	if c > z.capacity() {
		return z.capacity()
	}
	return c
}

// hostile reports whether x's response stated its cost to z by a value
// the docs bound: not a number from 0 to the capacity.
func hostile(z *zone, x *rec) bool {
	if z.costBytes || x.rc == nil {
		return false
	}
	c, err := strconv.ParseFloat(strings.TrimSpace(x.rc.tokens), 64)
	return !x.rc.header || err != nil || !(c >= 0) || c > z.capacity()
}

// costFigures are the cost check's figures.
type costFigures struct {
	admitted, unsure      int // admissions checked against the bound, and of them those whose settlement a fault may have lost
	hostile               int // of them, answers with a hostile cost
	trailers              int // of them, answers whose cost came in a stream's trailer (perhaps a hostile one)
	left, cut             int // of them, streams cut short after the first event, and of those the upstream broke off
	streams, streamsNear  int // streams whose first event's time was checked, and those left out near a stall
	slowestStream         time.Duration
	debts, held, released int // the debt key's refusals checked for Retry-After, of them in debt for certain, admissions after Retry-After
	remaining             int // the debt key's admissions whose Remaining was checked
	worstDebt             float64
}

// unsettled reports whether x's settlement may not have reached its
// store: a fault on its host's way to Redis, a stall, or a decision of
// its host that timed out, near the time it was settled.
func (ev *evaluation) unsettled(x *rec) bool {
	t := ev.t
	a, b := x.s, x.d+settleLag
	for _, f := range t.faults {
		fa, fb := f.window()
		if fb < a || fa > b {
			continue
		}
		for _, h := range t.affects(f) {
			if h == x.h {
				return true
			}
		}
	}
	if t.stalled(x.h, a, b) >= 50*time.Millisecond {
		return true
	}
	for _, y := range ev.slow[x.h] {
		if y.e >= a-time.Second && y.s <= b+time.Second {
			return true
		}
	}
	return false
}

// slowDecisions indexes, by host, the answers of a failure policy or a
// fallback that came after the decision timeout.
func slowDecisions(recs []*rec) map[*host][]*rec {
	out := map[*host][]*rec{}
	for _, x := range recs {
		if (x.cls == classPolicy || x.cls == classFallback) && x.e-x.s >= slowAnswer {
			out[x.h] = append(out[x.h], x)
		}
	}
	return out
}

// costBound checks zone z, whose cost comes from the response, on the
// answers xs of route r in group g, decided in Redis (h nil) or by h's
// local fallback: over the admissions i..j of a key (by their send), the
// costs they were charged, each settled by the docs' rules, are at most
//
//	B + r·(t1 − t0) + O + P
//
// t0 the send of i, t1 the latest instant a settlement of i..j reached
// the store (an answer's body read, and settleLag); O the debt the docs
// allow, what the requests in progress when the key last ran out cost
// beyond their estimates (each admission leaves the key at least its
// estimate; the last one was sent after j was, so every request it
// overshot was settled after j's send: the sum of c − e over the
// admissions in progress from j's send to t1); P the estimates of the
// requests in progress at t0, which a settlement or a refusal by another
// limit may give back within the interval. A settlement that a fault may
// have lost is the failure policy's domain: such a request counts at what
// the store surely charged it, the lesser of its estimate and its cost.
// The fallback's B and r are the instance's share; a response counts at
// most the zone's whole capacity there too. An interval in which Redis
// started empty is left out (the key starts afresh).
func (ev *evaluation) costBound(g *group, r *route, z *zone, xs []*rec, h *host) {
	t := ev.t
	cls := classRedis
	capacity, rate := z.capacity(), z.rate()
	who := g.name + "'s store"
	if h != nil {
		cls, who = classFallback, h.name+"'s fallback"
		n := float64(r.instances(g))
		capacity, rate = capacity/n, rate/n
		if capacity < 1 {
			capacity = 1
		}
	}
	adms := map[string][]*rec{}
	mine := map[string][]*rec{}
	for _, x := range xs {
		if x.cls != cls || h != nil && x.h != h {
			continue
		}
		k := keyOf(z, x.key)
		mine[k] = append(mine[k], x)
		if x.admitted() {
			adms[k] = append(adms[k], x)
		}
	}
	keys := make([]string, 0, len(adms))
	for k := range adms {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		adm := adms[k]
		n := len(adm)
		sure, over := make([]float64, n), make([]float64, n)
		longest := time.Duration(0) // the longest time from a send to its settlement
		for _, y := range mine[k] {
			if d := y.d + settleLag - y.s; d > longest {
				longest = d
			}
		}
		for i, x := range adm {
			c := settledCost(z, x)
			sure[i] = c
			if h == nil && ev.unsettled(x) {
				sure[i] = math.Min(c, z.cost)
				ev.costFig.unsure++
			}
			if most := mostCost(z, x); most > z.cost {
				over[i] = most - z.cost
			}
			if hostile(z, x) {
				ev.costFig.hostile++
			}
			if x.rc != nil && x.rc.trailer && x.rc.header && !z.costBytes {
				ev.costFig.trailers++
			}
			if x.left() && !z.costBytes {
				ev.costFig.left++
				if x.rc.upstreamCuts {
					ev.costFig.cut++
				}
			}
		}
		ev.costFig.admitted += n
		ev.checked["cost"] += n
		// inProgress sums f over the admissions in progress at some
		// instant of [a, b].
		inProgress := func(a, b time.Duration, f func(i int) float64) float64 {
			sum := 0.0
			for i := sort.Search(n, func(i int) bool { return adm[i].s >= a-longest }); i < n && adm[i].s <= b; i++ {
				if adm[i].d+settleLag >= a {
					sum += f(i)
				}
			}
			return sum
		}
		var best *violation
		bestOver := 0.0
		for i := 0; i < n; i++ {
			// P: the estimates of the store's requests of the key in
			// progress at t0 sent before it.
			p := 0.0
			ys := mine[k]
			for m := sort.Search(len(ys), func(m int) bool { return ys[m].s >= adm[i].s-longest }); m < len(ys) && ys[m].s < adm[i].s; m++ {
				if ys[m].d+settleLag >= adm[i].s {
					p += z.cost
				}
			}
			sum, t1 := 0.0, time.Duration(0)
			for j := i; j < n && adm[j].s-adm[i].s < horizon; j++ {
				sum += sure[j]
				if e := adm[j].d + settleLag; e > t1 {
					t1 = e
				}
				if h == nil && t.restartsIn(g, adm[i].s-settleLag, t1) > 0 {
					break
				}
				o := inProgress(adm[j].s, t1, func(m int) float64 { return over[m] })
				span := (t1 - adm[i].s + penaltyEps).Seconds()
				bound := capacity + rate*span + o + p
				ev.ratio("cost", sum, bound)
				if sum > bound+1e-6 && sum-bound > bestOver {
					bestOver = sum - bound
					best = &violation{check: "cost", groups: []*group{g}, recs: append([]*rec(nil), adm[i:j+1]...), from: adm[i].s, to: t1,
						msg: fmt.Sprintf("%s: zone %s (token_bucket, capacity %v, %v/s, estimate %v, cost from the %s), key %s: the %d admissions between %.3fs and %.3fs were charged %.2f, more than the bound %.2f = %v + %v·%.3f s + %.2f (what the requests in progress when it ran out cost beyond their estimates) + %.2f (estimates in progress at the start)",
							who, z.name, capacity, rate, z.cost, costSource(z), k, j-i+1, adm[i].s.Seconds(), t1.Seconds(), sum, bound, capacity, rate, span, o, p)}
				}
			}
		}
		if best != nil {
			ev.add(best)
		}
	}
}

func costSource(z *zone) string {
	if z.costBytes {
		return "body's bytes"
	}
	return z.costHeader + " header"
}

// debt checks the debt key of route r in group g (debtLoop), whose
// requests, sent one at a time, are the only ones to touch its state, so
// that the state of its tokens limit z (estimate e, capacity B, rate r)
// is known within bounds [lo, hi] from the answers: full at the start;
// refilled over the time between two decisions (at most from the last
// send to this answer, at least from the last settlement to this send);
// an admission charges e, and its settlement c − e (given back, within
// the capacity, when below); an admission shows the key had e, a refusal
// that it had less, and X-RateLimit-Remaining the whole units left after
// the admission. A fault, a stall or a timed-out decision near a request
// may lose a settlement or run a decision the policy answered: the bounds
// are then forgotten (lo −∞, hi B) until an admission shows them again.
// It holds:
//   - a key in debt is refused: no admission while hi < e;
//   - truthfully: a refusal's Retry-After (and the RateLimit field's t)
//     at least the time the rate needs to repay the debt and the estimate
//     less a second, (e − hi)/r − 1, and at most (e − lo)/r + 1 (rounded
//     up): a response that counted more than the capacity would hold the
//     key out longer;
//   - then admitted: a request sent after a refusal's Retry-After has
//     passed is admitted, as is one sent while lo ≥ e;
//   - a hostile header does not make a request cheaper than its estimate:
//     the Remaining of an admission is at most hi − e.
func (ev *evaluation) debt(g *group, r *route, xs []*rec) {
	t := ev.t
	z := r.zones[0]
	B, rate, e := z.capacity(), z.rate(), z.cost
	const tol = 0.05
	slack := rate * penaltyEps.Seconds()
	var mine []*rec
	for _, x := range xs {
		if x.key == debtKey(g) {
			mine = append(mine, x)
		}
	}
	lo, hi := B, B
	loAt, hiAt := time.Duration(0), time.Duration(0)
	var prev *rec
	fail := func(x *rec, format string, args ...interface{}) {
		recs := near(mine, x.s-10*time.Second, x.e)
		ev.add(&violation{check: "cost", groups: []*group{g}, recs: recs, from: recs[0].s, to: x.e,
			msg: fmt.Sprintf("%s: zone %s (token_bucket, capacity %v, %v/s, estimate %v), key %s, sent one request at a time: request %d ", g.name, z.name, B, rate, e, x.key, x.id) + fmt.Sprintf(format, args...)})
	}
	for _, x := range mine {
		from := x.s - time.Second
		if prev != nil {
			from = prev.s
		}
		if t.restartsIn(g, from, x.e) > 0 {
			hi, hiAt = B, x.s
		}
		if x.cls != classRedis || ev.unsettled(x) || prev != nil && (ev.unsettled(prev) || x.s < prev.d+settleLag) {
			lo, hi, loAt, hiAt = math.Inf(-1), B, x.e, x.s
			prev = x
			continue
		}
		loD := math.Min(B, lo+rate*math.Max(0, (x.s-loAt).Seconds())) - slack
		hiD := math.Min(B, hi+rate*(x.e-hiAt).Seconds()) + slack
		switch {
		case x.admitted():
			if hiD < e-tol {
				fail(x, "was admitted at %.3fs..%.3fs while the key was in debt: at most %.2f tokens, less than its estimate %v", x.s.Seconds(), x.e.Seconds(), hiD, e)
			}
			loD = math.Max(loD, e)
			lo, hi = loD-e, hiD-e
			if x.zone == z.name {
				ev.costFig.remaining++
				if x.rem > hi+tol {
					fail(x, "was admitted with X-RateLimit-Remaining %v, more than the %.2f tokens at most left after its estimate: an earlier response charged less than its estimate", x.rem, hi)
				}
				hi = math.Min(hi, x.rem+1)
				lo = math.Max(lo, x.rem)
			}
			c := settledCost(z, x)
			lo, hi = math.Min(B, lo-(c-e)), math.Min(B, hi-(c-e))
			if -lo > ev.costFig.worstDebt && !math.IsInf(lo, -1) {
				ev.costFig.worstDebt = -lo
			}
			loAt, hiAt = x.d+settleLag, x.s
		case x.zone == z.name:
			ev.costFig.debts++
			if hiD < e-tol {
				ev.costFig.held++
			}
			if loD >= e+tol {
				fail(x, "was refused at %.3fs..%.3fs although the key had at least %.2f tokens, its estimate %v: held out after its debt was repaid", x.s.Seconds(), x.e.Seconds(), loD, e)
			}
			if prev != nil && prev.cls == classRedis && !prev.admitted() && prev.zone == z.name && x.s >= prev.e+time.Duration(prev.retry)*time.Second+penaltyEps {
				fail(x, "was refused at %.3fs, sent %.3f s after request %d was refused with Retry-After %d, nothing admitted between", x.s.Seconds(), (x.s - prev.e).Seconds(), prev.id, prev.retry)
			}
			least := (e-hiD)/rate - 1
			if float64(x.retry) < least || float64(x.t) < least {
				fail(x, "was refused with Retry-After %d and t=%d, less than the %.3f s the rate needs to repay the debt and the estimate (at least %.2f tokens missing) less a second", x.retry, x.t, least+1, e-hiD)
			}
			if most := math.Ceil((e-loD)/rate) + 1; !math.IsInf(lo, -1) && float64(x.retry) > most {
				fail(x, "was refused with Retry-After %d, more than the %v s in which the rate repays the most debt the answers allow (%.2f tokens missing): a response counted more than the capacity", x.retry, most, e-loD)
			}
			lo, hi = loD, math.Min(hiD, e)
			loAt, hiAt = x.e, x.s
		default:
			lo, hi, loAt, hiAt = math.Inf(-1), B, x.e, x.s
		}
		// Releases checked: an admission after a refusal's Retry-After.
		if x.admitted() && prev != nil && prev.cls == classRedis && !prev.admitted() && x.s >= prev.e+time.Duration(prev.retry)*time.Second+penaltyEps {
			ev.costFig.released++
		}
		prev = x
	}
}

// streamFirst bounds the time from the send of a stream its client
// leaves (respCost.leave) to its first event: the decision, at most the
// decision timeout (100 ms) and a fallback's, and the upstream's first
// write. A host that held the stream back until its buffers filled or it
// ended would send the first event with the last, leaveEvery·2 = 800 ms
// after the upstream began.
const streamFirst = 600 * time.Millisecond

// streams checks that every stream of route r in group g that its client
// left after the first event (x.left, not upstreamCuts) reached the
// client event by event: its first event came within streamFirst of its
// send, unless the machine or the host's Redis stalled meanwhile.
func (ev *evaluation) streams(g *group, r *route, xs []*rec) {
	for _, x := range xs {
		if !x.left() || x.rc.upstreamCuts {
			continue
		}
		if ev.t.stalled(x.h, x.s, x.d) >= 50*time.Millisecond {
			ev.costFig.streamsNear++
			continue
		}
		ev.costFig.streams++
		ev.checked["cost"]++
		d := x.d - x.s
		if d > ev.costFig.slowestStream {
			ev.costFig.slowestStream = d
		}
		if d > streamFirst {
			ev.add(&violation{check: "cost", groups: []*group{g}, recs: []*rec{x}, from: x.s, to: x.d,
				msg: fmt.Sprintf("%s: route %s, host %s: the first event of a stream (one every %v) reached its client %.3f s after the request, more than %v: the host held the stream back instead of sending each event as it came",
					g.name, r.name, x.h.name, leaveEvery, d.Seconds(), streamFirst)})
		}
	}
}
