package yaegibench

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
)

// Client addresses of the cases.
const (
	ipv4 = "192.0.2.1:1234"
	ipv6 = "[2001:db8::1]:1234"
)

// A limit that is never reached: a token bucket (or queue, or window) of
// 10⁹ per second. One that rejects all but the first request: one per
// hour, burst 1.
var (
	open   = map[string]any{"average": 1000000000, "burst": 1000000000}
	closed = map[string]any{"average": 1, "period": "1h", "burst": 1}
)

// metricsOn is the metrics option of the cases with metrics, which
// record each limit's demand by default; metricsNoDemand records none.
var (
	metricsOn       = map[string]any{"address": "127.0.0.1:0"}
	metricsNoDemand = map[string]any{"address": "127.0.0.1:0", "demandKeys": "off"}
)

// with returns base with the given options added.
func with(base map[string]any, kv ...any) map[string]any {
	m := map[string]any{}
	for k, v := range base {
		m[k] = v
	}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return m
}

// A pluginCase is one configuration and one client, sent the same request
// over and over.
type pluginCase struct {
	name    string
	trivial bool // the one-header plugin instead of sluice
	floor   bool // the bare token bucket instead of sluice
	// redisFloor: the bare Redis token bucket instead of sluice
	redisFloor bool
	config     map[string]any
	remote     string
	header     http.Header // of the request, beside the client address
	answer     http.Header // of next's response
	// rejected: every measured request is answered 429 (the first one,
	// unmeasured, takes the only token).
	rejected bool
	// callers, when not 0, serve the request at once (measureParallel),
	// on a Redis pool of pool connections (redis.poolSize). Such a case is
	// left out under -race: the interpreter copies values that hold a
	// mutex another goroutine is unlocking (reflect's copy of a method's
	// receiver in Yaegi v0.16.1's function wrapper), which the race
	// detector reports in some runs; test.sh runs TestYaegiAllocBudget
	// without -race too.
	callers, pool int
	// target is the most allocations one request should make (issue 8),
	// ceiling the most it may make today without failing
	// TestYaegiAllocBudget: at or a little above what it makes (more for
	// a case whose count varies from run to run); 0 for the trivial and
	// floor plugins, which are measured, not held to a count. Lower a
	// ceiling when a change lowers the count.
	target, ceiling float64
}

// redisCases are measured on a real redis-server, whose address replaces
// their "endpoints"; ceiling as for memoryCases (issue 8 sets no count for
// them, only a time). Their ceilings rose from 509 and 690 when the resp
// pool traded its channel for a mutex (29 allocations per request, two
// Lock/Unlock pairs): a select on a pool's channel mixed up the channels
// of several clients under Yaegi (see package core/await), and hung. The
// lease case is new: 1,204 allocations through Gate.Serve, 319 through the
// lane's serveLaneLease, which serveLaneAny tries first (286 when
// ServeLane called it, which cost every other case an allocation). Their
// counts fell when serveLaneRedis read a reply's digits through a table
// instead of converting each (535 → 530 allowed, 714 → 673 rejected,
// whose reply holds an hour in nanoseconds; 550 → 530 for an admission
// by a limit of 100/s, whose times take more digits), and the ceilings
// with them. The last case's 32 callers outnumber its 4 connections, so
// that its requests queue their commands (resp's natural batching); its
// count varies with the batches' sizes, from about 760 to 780, and was
// about 800 to 820 before a queued command whose context ends by its
// deadline went without a timer of its own.
var redisCases = []pluginCase{
	{name: "Redis floor: bare EVALSHA, five headers", redisFloor: true, config: open, remote: ipv4},
	{name: "token_bucket allowed on Redis", config: open, remote: ipv4, ceiling: 531},
	{name: "token_bucket rejected on Redis", config: closed, remote: ipv4, rejected: true, ceiling: 674},
	{name: "token_bucket allowed on Redis from a lease", config: with(open, "lease", 1000), remote: ipv4, ceiling: 335},
	{name: "token_bucket allowed on Redis, 32 callers, 4 connections", config: open, remote: ipv4, callers: 32, pool: 4, ceiling: 830},
}

// onRedis returns c configured on the Redis server at addr.
func onRedis(c pluginCase, addr string) pluginCase {
	if c.redisFloor {
		c.config = with(c.config, "address", addr)
	} else {
		r := map[string]any{"endpoints": []any{addr}}
		if c.pool != 0 {
			r["poolSize"] = c.pool
		}
		c.config = with(c.config, "redis", r)
	}
	return c
}

// Allocation targets per request, from issue 8: an allowed request on the
// common configuration, a rejected one, and every other case.
const (
	targetAllowed  = 130
	targetRejected = 250
	targetOther    = 250
)

// memoryCases are the cases on the in-memory store: token bucket allowed
// and rejected, from IPv4 and IPv6 clients; every other algorithm; two
// limits at once.
var memoryCases = []pluginCase{
	{name: "trivial plugin (one header)", trivial: true, remote: ipv4},
	{name: "floor: bare token bucket, five headers", floor: true, config: open, remote: ipv4},
	{name: "token_bucket allowed, IPv4", config: open, remote: ipv4, target: targetAllowed, ceiling: 217},
	{name: "token_bucket allowed, IPv6", config: open, remote: ipv6, target: targetAllowed, ceiling: 283},
	{name: "token_bucket rejected, IPv4", config: closed, remote: ipv4, rejected: true, target: targetRejected, ceiling: 460},
	{name: "token_bucket rejected, IPv6", config: closed, remote: ipv6, rejected: true, target: targetRejected, ceiling: 525},
	// Behind a load balancer, as Traefik's built-in rateLimit is
	// configured there (at a depth, or skipping the proxies' addresses),
	// and keyed by an API key.
	{name: "token_bucket allowed, behind a proxy (depth 1)", config: with(open, "sourceCriterion", map[string]any{"ipStrategy": map[string]any{"depth": 1}}),
		remote: ipv4, header: http.Header{"X-Forwarded-For": {"198.51.100.7, 203.0.113.9"}}, target: targetAllowed, ceiling: 307},
	{name: "token_bucket allowed, behind proxies (excludedIPs)", config: with(open, "sourceCriterion", map[string]any{"ipStrategy": map[string]any{"excludedIPs": []string{"10.0.0.0/8"}}}),
		remote: ipv4, header: http.Header{"X-Forwarded-For": {"198.51.100.7, 10.0.0.2"}}, target: targetAllowed, ceiling: 555},
	{name: "token_bucket allowed, keyed by a header", config: with(open, "sourceCriterion", map[string]any{"requestHeaderName": "X-Api-Key"}),
		remote: ipv4, header: http.Header{"X-Api-Key": {"key-123456"}}, target: targetAllowed, ceiling: 276},
	{name: "token_bucket allowed, headers off", config: with(open, "headers", "off"), remote: ipv4, target: targetAllowed, ceiling: 208},
	{name: "leaky_bucket allowed", config: with(open, "algorithm", "leaky_bucket"), remote: ipv4, target: targetOther, ceiling: 384},
	{name: "leaky_bucket rejected", config: with(closed, "algorithm", "leaky_bucket"), remote: ipv4, rejected: true, target: targetOther, ceiling: 542},
	{name: "fixed_window allowed", config: map[string]any{"algorithm": "fixed_window", "average": 1000000000}, remote: ipv4, target: targetOther, ceiling: 317},
	{name: "fixed_window rejected", config: map[string]any{"algorithm": "fixed_window", "average": 1, "period": "1h"}, remote: ipv4, rejected: true, target: targetOther, ceiling: 474},
	{name: "sliding_window_counter allowed", config: map[string]any{"algorithm": "sliding_window_counter", "average": 1000000000}, remote: ipv4, target: targetOther, ceiling: 405},
	{name: "sliding_window_counter rejected", config: map[string]any{"algorithm": "sliding_window_counter", "average": 1, "period": "1h"}, remote: ipv4, rejected: true, target: targetOther, ceiling: 564},
	// The log holds the last 20 ms of requests: fewer than its 10,000
	// entries at any speed the interpreter reaches.
	{name: "sliding_window_log allowed", config: map[string]any{"algorithm": "sliding_window_log", "average": 10000, "period": "20ms"}, remote: ipv4, target: targetOther, ceiling: 406},
	{name: "sliding_window_log rejected", config: map[string]any{"algorithm": "sliding_window_log", "average": 1, "period": "1h"}, remote: ipv4, rejected: true, target: targetOther, ceiling: 552},
	// With metrics, every verdict is counted and timed
	// (core.ServeLaneMetered, which decides one limit as serveLaneOne
	// does): the first token_bucket cases' configurations, metrics served
	// on a port the system picks. Counts 438 and 605 without the
	// demand, against 216 and 450 without metrics; recording the demand
	// (the default with metrics) 531 and 698, the call of
	// demand.Recorder.Add costing its frame's values.
	{name: "token_bucket allowed, IPv4, metrics", config: with(open, "metrics", metricsOn), remote: ipv4, target: targetAllowed, ceiling: 562},
	{name: "token_bucket rejected, IPv4, metrics", config: with(closed, "metrics", metricsOn), remote: ipv4, rejected: true, target: targetRejected, ceiling: 738},
	{name: "token_bucket allowed, IPv4, metrics without demand", config: with(open, "metrics", metricsNoDemand), remote: ipv4, target: targetAllowed, ceiling: 454},
	{name: "token_bucket rejected, IPv4, metrics without demand", config: with(closed, "metrics", metricsNoDemand), remote: ipv4, rejected: true, target: targetRejected, ceiling: 629},
	{name: "two limits allowed (per IP + global)", config: with(open, "limits", []any{
		map[string]any{"name": "global", "average": 1000000000, "burst": 1000000000, "key": "const:all"},
	}), remote: ipv4, target: targetOther, ceiling: 691},
	{name: "two limits, the second rejects", config: with(open, "limits", []any{
		map[string]any{"name": "global", "average": 1, "period": "1h", "burst": 1, "key": "const:all"},
	}), remote: ipv4, rejected: true, target: targetOther, ceiling: 957},
	// The options that take a lane off its fused paths to Gate.Serve:
	// a penalty, which the store applies, and countStatus and
	// costHeader, whose response the handler observes (the next handler
	// answers 200, which 401 does not count, so every admission is given
	// back; and X-Cost: 2, settled above the estimate of 0). Counts 1303,
	// 1625, 1742 and 1862: Gate.Serve's general path, six to eight times
	// the fused lane's.
	{name: "token_bucket allowed, penalty", config: with(open, "penalty", "1m"), remote: ipv4, target: targetOther, ceiling: 1330},
	{name: "token_bucket rejected, penalty", config: with(closed, "penalty", "1m"), remote: ipv4, rejected: true, target: targetOther, ceiling: 1660},
	{name: "token_bucket allowed, countStatus 401", config: with(open, "countStatus", []string{"401"}), remote: ipv4, target: targetOther, ceiling: 1780},
	{name: "token_bucket allowed, costHeader", config: with(open, "costHeader", "X-Cost"), answer: http.Header{"X-Cost": {"2"}}, remote: ipv4, target: targetOther, ceiling: 1900},
}

// plugins holds the four interpreters, loaded once per test binary: an
// import takes about a second.
var plugins struct {
	once                               sync.Once
	sluice, trivial, floor, redisFloor *plugin
}

func loadPlugins(tb testing.TB) (sluice, trivial, floor, redisFloor *plugin) {
	plugins.once.Do(func() {
		dir := gopath(tb)
		plugins.sluice = load(tb, dir, pluginImport)
		plugins.trivial = load(tb, dir, trivialImport)
		plugins.floor = load(tb, dir, floorImport)
		plugins.redisFloor = load(tb, dir, redisFloorImport)
	})
	if plugins.sluice == nil || plugins.trivial == nil || plugins.floor == nil || plugins.redisFloor == nil {
		tb.Fatal("loading the plugins failed")
	}
	return plugins.sluice, plugins.trivial, plugins.floor, plugins.redisFloor
}

// build returns c's handler, a request from its client, and checks that
// the handler answers as c says (its first request is the unmeasured one
// that empties a closed limit).
func build(tb testing.TB, c pluginCase, seq int) (http.Handler, *next, *http.Request) {
	tb.Helper()
	sluice, trivial, floor, redisFloor := loadPlugins(tb)
	p := sluice
	switch {
	case c.trivial:
		p = trivial
	case c.floor:
		p = floor
	case c.redisFloor:
		p = redisFloor
	}
	nx := &next{header: c.answer}
	// A middleware name per case and run: entries never share counters.
	h := p.handler(tb, c.config, "case"+strconv.Itoa(seq)+"@file", nx)
	req := httptest.NewRequest(http.MethodGet, "http://example.com/", nil)
	req.RemoteAddr = c.remote
	for k, v := range c.header {
		req.Header[k] = v
	}
	probe := measure(h, nx, req, 1, 1, 1)
	if probe.passed == c.rejected || (c.rejected && probe.status != http.StatusTooManyRequests) {
		tb.Fatalf("%s: status %d, reached next %v; want rejected %v", c.name, probe.status, probe.passed, c.rejected)
	}
	return h, nx, req
}
