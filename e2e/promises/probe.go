package main

import (
	"fmt"
	"strconv"
	"sync"
	"time"
)

// probeResult is the verdict of one probe of a quiet key's headers.
type probeResult struct {
	g            *group
	r            *route
	key          string
	inconclusive bool // an answer did not come from Redis (a fault)
	problem      string
	recs         []*rec
}

var (
	probeMu      sync.Mutex
	probeResults []*probeResult
)

// probeLoop probes the headers of route r (one limit) in group g on
// fresh quiet keys, one after another, from delay until stop is closed.
func (t *topology) probeLoop(g *group, r *route, delay time.Duration, stop <-chan struct{}) {
	// The loops start apart, not all with the load.
	time.Sleep(delay)
	for n := 0; ; n++ {
		select {
		case <-stop:
			return
		default:
		}
		res := t.probe(g, r, fmt.Sprintf("%s-q%s-%d", g.name, r.name, n), stop)
		if res == nil {
			return
		}
		probeMu.Lock()
		probeResults = append(probeResults, res)
		probeMu.Unlock()
		if res.inconclusive {
			// A fault: wait for its end rather than probe through it.
			select {
			case <-stop:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// probe checks, on a key nobody else uses, asked of the group's hosts in
// turn, that the answers' headers are truthful:
//   - Remaining: an admitted answer saying r remain is followed by r
//     more admissions (the requests are sent one after another);
//   - Retry-After: a 429's is at least its RateLimit t, and the request
//     sent that many seconds after the 429 is admitted;
//   - Reset: a request sent once the Unix time is X-RateLimit-Reset finds
//     the limit whole again (Remaining is the capacity less one).
//
// It returns nil when stop closed before the probe ended.
func (t *topology) probe(g *group, r *route, key string, stop <-chan struct{}) *probeResult {
	z := r.zones[0]
	res := &probeResult{g: g, r: r, key: key}
	n := 0
	next := func() *rec {
		h := g.hosts[n%len(g.hosts)]
		n++
		x := t.send(h, r, key, 0, nil)
		res.recs = append(res.recs, x)
		if x.cls != classRedis {
			res.inconclusive = true
		}
		return x
	}
	sleep := func(d time.Duration) bool {
		select {
		case <-stop:
			return false
		case <-time.After(d):
			return true
		}
	}
	var rejected *rec
	if z.alg == "leaky_bucket" {
		// Admitted requests wait for their turn, so the queue fills
		// only with requests sent together: its capacity and two more,
		// 5 ms apart; the first refused is the 429 checked below. Their
		// Remaining is not checked: each counts the others still queued.
		var wg sync.WaitGroup
		xs := make([]*rec, int(z.capacity())+2)
		for i := range xs {
			wg.Add(1)
			h := g.hosts[i%len(g.hosts)]
			go func(i int) {
				defer wg.Done()
				xs[i] = t.send(h, r, key, 0, nil)
			}(i)
			time.Sleep(5 * time.Millisecond)
		}
		wg.Wait()
		for _, x := range xs {
			res.recs = append(res.recs, x)
			if x.cls != classRedis {
				res.inconclusive = true
				return res
			}
			if !x.admitted() && rejected == nil {
				rejected = x
			}
		}
		n = len(xs)
	}
	// Until a 429, checking each Remaining against what follows.
	var claims []int // per admitted answer, the admissions it promised
	for i := 0; rejected == nil && i < int(z.capacity())+6; i++ {
		x := next()
		if res.inconclusive {
			return res
		}
		if !x.admitted() {
			for j, c := range claims {
				if c > 0 {
					res.problem = fmt.Sprintf("Remaining: answer %d said %d remain, but request %d (the %d. after it) was refused", res.recs[j].id, c+len(claims)-j-1, x.id, len(claims)-j)
					return res
				}
			}
			rejected = x
			break
		}
		for j := range claims {
			claims[j]--
		}
		claims = append(claims, int(x.rem))
	}
	if rejected == nil {
		res.problem = fmt.Sprintf("no 429 after %d requests to a limit of capacity %v", len(res.recs), z.capacity())
		return res
	}
	if rejected.retry < 1 {
		res.problem = fmt.Sprintf("the 429 (request %d) has Retry-After %d", rejected.id, rejected.retry)
		return res
	}
	if rejected.t > rejected.retry {
		res.problem = fmt.Sprintf("the 429 (request %d) has Retry-After %d, earlier than its RateLimit t=%d", rejected.id, rejected.retry, rejected.t)
		return res
	}
	wait := time.Duration(rejected.retry)*time.Second - (t.since() - rejected.e)
	if wait > 0 && !sleep(wait) {
		return nil
	}
	x := next()
	if res.inconclusive {
		return res
	}
	if !x.admitted() {
		res.problem = fmt.Sprintf("Retry-After: request %d, sent %v after the 429 that said %d s, was refused", x.id, (x.s - rejected.e).Round(time.Millisecond), rejected.retry)
		return res
	}
	// Reset: wait for the Unix second it names.
	reset := time.Unix(x.reset, 0)
	if wait := time.Until(reset); wait > 0 && !sleep(wait) {
		return nil
	}
	y := next()
	if res.inconclusive {
		return res
	}
	if !y.admitted() || y.rem < z.capacity()-1-1e-9 {
		res.problem = fmt.Sprintf("Reset: request %d, sent at the Unix time %d that request %d's X-RateLimit-Reset named, found %d with Remaining %s, want 200 and %v", y.id, x.reset, x.id, y.code, strconv.FormatFloat(y.rem, 'f', -1, 64), z.capacity()-1)
	}
	return res
}
