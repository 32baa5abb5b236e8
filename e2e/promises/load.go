package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// class is where an answer came from, as its headers tell.
type class uint8

const (
	classRedis    class = iota // a limit decided it in Redis (or from a lease of it): X-RateLimit-Limit is the zone's quota
	classFallback              // the local fallback decided it: X-RateLimit-Limit is the instance's share
	classPolicy                // the failure policy answered: no rate-limit headers
	classHungUp                // the client hung up first, as planned
	classFailed                // the request failed (transport error, 5xx)
)

var classNames = [...]string{"redis", "fallback", "policy", "hung-up", "failed"}

func (c class) String() string { return classNames[c] }

// rec is one request and its answer.
type rec struct {
	id    int
	g     *group
	h     *host
	r     *route
	key   string        // the X-Key value (the group's prefix included)
	ask   int           // the status asked of the upstream (?status=), or 0
	s, e  time.Duration // sent, answered (headers read), since the run's start
	code  int
	cls   class
	zone  string  // the zone the answer reports (the RateLimit header's name)
	lim   float64 // X-RateLimit-Limit
	rem   float64 // X-RateLimit-Remaining
	reset int64   // X-RateLimit-Reset, Unix seconds
	retry int     // Retry-After, seconds
	t     int     // the RateLimit header's t
	err   string
	rc    *respCost     // the cost asked of the upstream, or nil
	d     time.Duration // the body read to its end, since the run's start
	n     int64         // the body's bytes
}

// admitted reports whether the request went on: a 2xx, or the status
// asked of the upstream.
func (r *rec) admitted() bool { return r.code >= 200 && r.code < 300 || r.ask != 0 && r.code == r.ask }

func (r *rec) String() string {
	s := fmt.Sprintf("req %d %7.3fs..%7.3fs %-4s %-14s key=%-10s", r.id, r.s.Seconds(), r.e.Seconds(), r.h.name, r.r.path, r.key)
	switch r.cls {
	case classHungUp:
		return s + " client hung up"
	case classFailed:
		return s + fmt.Sprintf(" FAILED %d %s", r.code, r.err)
	}
	s += fmt.Sprintf(" %d %s", r.code, r.cls)
	if r.zone != "" {
		s += fmt.Sprintf(" zone=%s limit=%s remaining=%s reset=%d t=%d", r.zone, fmtNum(r.lim), fmtNum(r.rem), r.reset, r.t)
	}
	if r.retry > 0 {
		s += fmt.Sprintf(" retry-after=%d", r.retry)
	}
	if r.rc != nil {
		s += " asked " + r.rc.String()
	}
	return s
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// planned is a request of the workload, drawn before the run.
type planned struct {
	at     time.Duration
	g      *group
	h      *host
	r      *route
	key    string
	hangUp time.Duration // the client hangs up after this long; 0: it waits
	ask    int           // the status asked of the upstream, or 0
	rc     *respCost     // the cost asked of the upstream, or nil
}

// plan draws the workload of a run of length d: for each group and each
// route with traffic, Poisson arrivals at the route's rate times scale,
// each to a random host of the group (the first for a solo route) with a
// random key of the route's; hang-ups for the routes that have them, and
// for those with fails, 401 or 403 asked of the upstream, or 200.
func plan(rnd *rand.Rand, t *topology, d time.Duration, scale float64) []planned {
	var out []planned
	for _, g := range t.groupList {
		for _, r := range g.routes {
			if r.probe || r.rate == 0 {
				continue
			}
			rate := r.rate * scale
			at := time.Duration(0)
			for {
				at += time.Duration(rnd.ExpFloat64() / rate * float64(time.Second))
				if at >= d {
					break
				}
				p := planned{at: at, g: g, r: r, key: g.name + "-k" + strconv.Itoa(rnd.Intn(r.keys))}
				if r.solo {
					p.h = g.hosts[0]
				} else {
					p.h = g.hosts[rnd.Intn(len(g.hosts))]
				}
				if r.cancel > 0 && rnd.Float64() < r.cancel {
					p.hangUp = time.Duration(50+rnd.Intn(600)) * time.Millisecond
				}
				if r.costs {
					p.rc = drawCost(rnd, false)
				}
				if r.fails > 0 {
					p.ask = 200
					if rnd.Float64() < r.fails {
						p.ask = 401 + 2*rnd.Intn(2)
					}
				}
				out = append(out, p)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// recorder holds every answer of the run.
type recorder struct {
	mu   sync.Mutex
	recs []*rec
}

func (rc *recorder) add(r *rec) {
	rc.mu.Lock()
	r.id = len(rc.recs)
	rc.recs = append(rc.recs, r)
	rc.mu.Unlock()
}

func (rc *recorder) all() []*rec {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]*rec(nil), rc.recs...)
}

// client sends every request of the run.
var client = &http.Client{
	Transport: &http.Transport{MaxIdleConns: 1024, MaxIdleConnsPerHost: 128, IdleConnTimeout: 30 * time.Second, DisableCompression: true},
	CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	},
}

// pathOf is the path a request of route r with key k is sent to: under
// an upstream route, one the backend counts apart per group and key (or,
// with ask, answers with that status).
func pathOf(r *route, key string, ask int) string {
	if !r.upstream {
		return r.path
	}
	p := r.path + key
	if hold := holdOf(r, key); hold > 0 {
		p += "?sleep=" + hold.String()
	} else if ask != 0 {
		p += "?status=" + strconv.Itoa(ask)
	}
	return p
}

// send sends one request to h for route r with key (and any extra
// headers), recording its answer; hangUp > 0 hangs up after that long.
func (t *topology) send(h *host, r *route, key string, hangUp time.Duration, extra http.Header) *rec {
	return t.sendAsking(h, r, key, 0, hangUp, extra)
}

// sendAsking is send asking the upstream to answer status ask (0: its
// own).
func (t *topology) sendAsking(h *host, r *route, key string, ask int, hangUp time.Duration, extra http.Header) *rec {
	return t.do(&rec{g: h.group, h: h, r: r, key: key, ask: ask}, hangUp, extra)
}

// do sends x's request (to x.h, for x.r with x.key, asking x.ask and
// x.rc of the upstream) and records its answer in x.
func (t *topology) do(x *rec, hangUp time.Duration, extra http.Header) *rec {
	h, r, key := x.h, x.r, x.key
	timeout := 10 * time.Second
	if hangUp > 0 {
		timeout = hangUp
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, h.url(pathOf(r, key, x.ask)+x.rc.query()), nil)
	req.Header.Set("X-Key", key)
	for k, vs := range extra {
		req.Header[k] = vs
	}
	x.s = t.since()
	resp, err := client.Do(req)
	x.e = t.since()
	x.d = x.e
	if err != nil {
		if hangUp > 0 && errors.Is(err, context.DeadlineExceeded) {
			x.cls = classHungUp
		} else {
			x.cls, x.err = classFailed, err.Error()
		}
		t.rc.add(x)
		return x
	}
	if x.rc != nil && x.rc.leave && !x.rc.upstreamCuts && resp.StatusCode == http.StatusOK {
		n, _ := io.ReadFull(resp.Body, make([]byte, leftBytes)) // the first event, then leave
		x.n = int64(n)
	} else {
		x.n, _ = io.Copy(io.Discard, resp.Body)
	}
	resp.Body.Close()
	x.d = t.since()
	x.code = resp.StatusCode
	classify(x, resp.Header)
	t.rc.add(x)
	return x
}

// classify reads an answer's headers into x.
func classify(x *rec, hd http.Header) {
	if x.code >= 500 || (x.code != http.StatusOK && x.code != http.StatusTooManyRequests && x.code != x.ask) {
		x.cls, x.err = classFailed, "status "+strconv.Itoa(x.code)
		return
	}
	x.retry, _ = strconv.Atoi(hd.Get("Retry-After"))
	lim := hd.Get("X-RateLimit-Limit")
	if lim == "" {
		x.cls = classPolicy
		return
	}
	x.lim, _ = strconv.ParseFloat(lim, 64)
	x.rem, _ = strconv.ParseFloat(hd.Get("X-RateLimit-Remaining"), 64)
	x.reset, _ = strconv.ParseInt(hd.Get("X-RateLimit-Reset"), 10, 64)
	// RateLimit: "name";r=3;t=1
	if v := hd.Get("RateLimit"); strings.HasPrefix(v, `"`) {
		if i := strings.Index(v[1:], `"`); i >= 0 {
			x.zone = v[1 : 1+i]
			for _, p := range strings.Split(v[2+i:], ";") {
				if strings.HasPrefix(p, "t=") {
					x.t, _ = strconv.Atoi(p[2:])
				}
			}
		}
	}
	x.cls = classFallback
	for _, z := range x.r.zones {
		if z.name != x.zone {
			continue
		}
		full := z.quota
		if z.alg == "" {
			full = float64(z.inflight)
		}
		if math.Abs(x.lim-full) < 1e-6 {
			x.cls = classRedis
		}
	}
}

// runLoad sends the planned requests, each at its time from its own
// goroutine, at most 512 at once, until stop is closed or the plan ends.
func (t *topology) runLoad(ps []planned, stop <-chan struct{}) {
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	for _, p := range ps {
		select {
		case <-stop:
			wg.Wait()
			return
		case <-time.After(time.Until(t.start.Add(p.at))):
		}
		if p.r.name == "charge" && !chargeOpen(time.Now(), p.r.zones[0].period) {
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func(p planned) {
			defer wg.Done()
			t.do(&rec{g: p.g, h: p.h, r: p.r, key: p.key, ask: p.ask, rc: p.rc}, p.hangUp, nil)
			<-sem
		}(p)
	}
	wg.Wait()
}

// chargeQuiet is the end of each window of the charge zone in which no
// request is sent, so that Redis's count of the window can be read
// before it ends.
const chargeQuiet = 800 * time.Millisecond

// chargeOpen reports whether a request of the charge zone (a fixed
// window of period p) may be sent at now.
func chargeOpen(now time.Time, p time.Duration) bool {
	in := time.Duration(now.UnixNano() % int64(p))
	return in < p-chargeQuiet
}
