package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// zone is one limit as every host is configured with it: a Caddy zone, a
// Traefik limit, a sluicehttp.Limit of the same name.
type zone struct {
	name     string
	alg      string  // token_bucket, leaky_bucket, fixed_window, sliding_window_log, sliding_window_counter; "" with inflight alone
	quota    float64 // per period
	period   time.Duration
	burst    float64 // the buckets' capacity; 0 for the window algorithms
	maxDelay time.Duration
	lease    float64
	inflight int           // max_in_flight
	header   string        // the key's request header, or "" for the constant key "g"
	fleet    int           // demand_keys of a zone whose demand is recorded for the fleet; 0: not
	penalty  time.Duration // how long a key the zone refuses stays refused; 0: none
	// countStatus are the statuses (codes, or classes such as 4xx) of the
	// only responses the zone counts; nil: every response.
	countStatus []string
	// costHeader and costBytes take a request's cost from its response:
	// the number in that response header, or the bytes of its body; cost
	// is then the estimate charged at admission (0 when left out).
	costHeader string
	costBytes  bool
	cost       float64
}

// counts reports whether z counts a response of status code.
func (z *zone) counts(code int) bool {
	if z.countStatus == nil {
		return true
	}
	c := strconv.Itoa(code)
	for _, s := range z.countStatus {
		if s == c || len(s) == 3 && strings.HasSuffix(s, "xx") && s[0] == c[0] {
			return true
		}
	}
	return false
}

// capacity is what the zone admits at once: its burst, or its quota for
// a window algorithm.
func (z *zone) capacity() float64 {
	if z.burst > 0 {
		return z.burst
	}
	return z.quota
}

// rate is the zone's refill in cost units per second.
func (z *zone) rate() float64 { return z.quota / z.period.Seconds() }

// rateText is the zone's rate as every host writes it: 5/1s.
func (z *zone) rateText() string {
	return strconv.FormatFloat(z.quota, 'f', -1, 64) + "/" + durText(z.period)
}

// durText writes d as Go does, without a trailing "0s" ("1m", "10s").
func durText(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// route is a path that every host of a group serves through one sluice
// handler (a Caddy handle block, a Traefik router and middleware, a
// sluicehttp middleware), with its zones, its failure policy and the
// traffic the workload sends it.
type route struct {
	name     string // the Traefik middleware's name
	path     string // exact path, or a prefix ending in "/" for an upstream route
	zones    []*zone
	policy   string        // allow, deny, fallback
	upstream bool          // proxied to e2e/backend, which counts it (paths under /count/)
	hold     time.Duration // the backend holds each request this long
	rate     float64       // requests per second per group, in small mode
	keys     int           // distinct keys of the header the workload uses
	cancel   float64       // the share of requests whose client hangs up while held
	solo     bool          // only the group's first host gets traffic (a single instance)
	probe    bool          // only the header probes use it, on quiet keys
	memory   bool          // decided in memory (Caddy only)
	only     string        // the only kind of host configured with it ("caddy", "traefik"), or "" for all
	d4       bool          // the defect-4 route: its own proxy and a quick breaker
	inst     int           // the instances its fallback divides by, when not the group's hosts
	// fails is the share of the workload's requests that the upstream
	// answers 401 or 403 (half each; ?status=), the rest 200.
	fails float64
	// steady is the rate (per second, per group) of a key whose requests
	// are all answered 200, sent one at a time (uncountedLoop).
	steady float64
	// costs: the workload asks the upstream for a response cost per
	// request (drawCost), and one key per group is sent one request at a
	// time, driven into debt (debtLoop).
	costs bool
}

// instances is how many hosts a route's fallback divides its quotas by.
func (r *route) instances(g *group) int {
	switch {
	case r.inst > 0:
		return r.inst
	case r.solo:
		return 1
	}
	return len(g.hosts)
}

// routes are the workload's routes, the same in every group.
var routes = []*route{
	{name: "tb", path: "/tb", policy: "allow", rate: 16, keys: 3, zones: []*zone{
		{name: "tb", alg: "token_bucket", quota: 5, period: time.Second, burst: 3, header: "X-Key"},
		{name: "glob", alg: "sliding_window_counter", quota: 24, period: 2 * time.Second},
	}},
	{name: "fw", path: "/fw", policy: "deny", rate: 8, keys: 2, zones: []*zone{
		{name: "fw", alg: "fixed_window", quota: 6, period: 2 * time.Second, header: "X-Key"},
	}},
	{name: "swl", path: "/swl", policy: "fallback", rate: 8, keys: 2, zones: []*zone{
		{name: "swl", alg: "sliding_window_log", quota: 6, period: 2 * time.Second, header: "X-Key"},
		{name: "fw2", alg: "fixed_window", quota: 10, period: 3 * time.Second, header: "X-Key"},
	}},
	{name: "lease", path: "/lease", policy: "fallback", rate: 12, keys: 1, zones: []*zone{
		{name: "ls", alg: "token_bucket", quota: 8, period: time.Second, burst: 12, lease: 3},
	}},
	{name: "shape", path: "/count/shape/", upstream: true, policy: "deny", rate: 6, keys: 1, cancel: 0.2, zones: []*zone{
		{name: "lb", alg: "leaky_bucket", quota: 4, period: time.Second, burst: 3, maxDelay: 800 * time.Millisecond, header: "X-Key"},
	}},
	{name: "tbd", path: "/count/tbd/", upstream: true, policy: "deny", rate: 6, keys: 1, cancel: 0.2, zones: []*zone{
		{name: "tbd", alg: "token_bucket", quota: 4, period: time.Second, burst: 2, maxDelay: 400 * time.Millisecond, header: "X-Key"},
	}},
	{name: "slots", path: "/count/slots/", upstream: true, hold: 300 * time.Millisecond, policy: "deny", rate: 8, keys: 1, zones: []*zone{
		{name: "slot", inflight: 2, header: "X-Key"},
	}},
	{name: "solo", path: "/count/solo/", upstream: true, hold: 400 * time.Millisecond, policy: "fallback", solo: true, rate: 6, keys: 1, zones: []*zone{
		{name: "solo", inflight: 2, header: "X-Key"},
	}},
	{name: "pen", path: "/pen", policy: "fallback", rate: 6, keys: 2, zones: []*zone{
		{name: "pen", alg: "token_bucket", quota: 3, period: 2 * time.Second, burst: 3, penalty: 4 * time.Second, header: "X-Key"},
	}},
	{name: "cnt", path: "/cnt/", upstream: true, policy: "fallback", rate: 8, keys: 2, fails: 0.75, steady: 4, zones: []*zone{
		{name: "cnt", alg: "token_bucket", quota: 1, period: time.Second, burst: 3, countStatus: []string{"401"}, header: "X-Key"},
		{name: "cntw", alg: "sliding_window_log", quota: 6, period: 2 * time.Second, countStatus: []string{"4xx"}, header: "X-Key"},
	}},
	{name: "cost", path: "/cost/", upstream: true, policy: "fallback", rate: 6, keys: 2, costs: true, zones: []*zone{
		{name: "cst", alg: "token_bucket", quota: 16, period: 2 * time.Second, burst: 24, cost: 3, costHeader: "X-Tokens-Used", header: "X-Key"},
		{name: "cbt", alg: "token_bucket", quota: 3000, period: 2 * time.Second, burst: 4000, costBytes: true, header: "X-Key"},
	}},
	{name: "charge", path: "/charge", policy: "allow", rate: 5, keys: 2, zones: []*zone{
		{name: "chg", alg: "fixed_window", quota: 1000, period: 5 * time.Second, header: "X-Key"},
	}},
	{name: "ptb", path: "/probe/tb", policy: "allow", probe: true, zones: []*zone{
		{name: "ptb", alg: "token_bucket", quota: 3, period: 2 * time.Second, burst: 3, header: "X-Key"},
	}},
	{name: "pfw", path: "/probe/fw", policy: "allow", probe: true, zones: []*zone{
		{name: "pfw", alg: "fixed_window", quota: 3, period: 2 * time.Second, header: "X-Key"},
	}},
	{name: "pswl", path: "/probe/swl", policy: "allow", probe: true, zones: []*zone{
		{name: "pswl", alg: "sliding_window_log", quota: 3, period: 2 * time.Second, header: "X-Key"},
	}},
	{name: "pswc", path: "/probe/swc", policy: "allow", probe: true, zones: []*zone{
		{name: "pswc", alg: "sliding_window_counter", quota: 3, period: 2 * time.Second, header: "X-Key"},
	}},
	{name: "plb", path: "/probe/lb", policy: "allow", probe: true, zones: []*zone{
		{name: "plb", alg: "leaky_bucket", quota: 2, period: time.Second, burst: 2, maxDelay: time.Second, header: "X-Key"},
	}},
}

// defectRoutes serve the defect scenarios (defects.go), in the standalone
// groups only.
var defectRoutes = []*route{
	{name: "d2", path: "/d2", policy: "allow", probe: true, zones: []*zone{
		{name: "d2", alg: "token_bucket", quota: 2, period: time.Hour, burst: 2, header: "X-API-Key"},
	}},
	{name: "d3", path: "/d3", policy: "allow", probe: true, zones: []*zone{
		{name: "d3", alg: "token_bucket", quota: 5, period: 5 * time.Second, burst: 5, header: "X-Key", fleet: d3Keys},
	}},
	{name: "d3y", path: "/d3y", policy: "allow", probe: true, only: "caddy", zones: []*zone{
		{name: "d3y", alg: "token_bucket", quota: 1, period: 12 * 8760 * time.Hour, burst: 1, header: "X-Key", fleet: d3Keys},
	}},
	{name: "d4l", path: "/d4", policy: "allow", probe: true, only: "caddy", d4: true, zones: []*zone{
		{name: "d4l", alg: "token_bucket", quota: 1000, period: time.Second, burst: 1000, lease: 100},
	}},
	{name: "d4x", path: "/d4x", policy: "allow", probe: true, only: "caddy", d4: true, zones: []*zone{
		{name: "d4x", alg: "token_bucket", quota: 1000, period: time.Second, burst: 1000},
	}},
	{name: "d7m", path: "/d7m", policy: "allow", probe: true, only: "caddy", memory: true, zones: []*zone{
		{name: "d7m", alg: "token_bucket", quota: 3, period: time.Hour, burst: 3, header: "X-Key"},
	}},
	{name: "d7r", path: "/d7r", policy: "allow", probe: true, only: "caddy", zones: []*zone{
		{name: "d7r", alg: "token_bucket", quota: 3, period: time.Hour, burst: 3, header: "X-Key"},
	}},
}

// d3Keys is the demand_keys of the defect-3 zones.
const d3Keys = 32

// host is one server of the topology.
type host struct {
	name    string // c1..c4, t1, t2, svc
	kind    string // caddy, traefik, service
	group   *group
	port    int
	admin   int    // Caddy's admin endpoint
	metrics int    // the Traefik plugin's metrics listener
	proxy   *proxy // its way to the standalone Redis; nil on the Cluster
	d4proxy *proxy // c1's second way, for the defect-4 routes
	file    string // its Caddyfile or Traefik dynamic configuration
	gen     int    // reloads so far
}

func (h *host) url(path string) string { return "http://127.0.0.1:" + strconv.Itoa(h.port) + path }

// group is hosts that share every key of the workload: two Caddys and the
// Go service (share group g) on the standalone Redis, two Traefiks (one
// middleware name) on it, two Caddys on the Cluster.
type group struct {
	name    string // ga, gt, gk
	hosts   []*host
	cluster bool
	routes  []*route
	// redis are the addresses its hosts reach Redis at (proxies).
	redis []string
}

// hasRoute reports whether h is configured with r.
func hasRoute(h *host, r *route) bool {
	if r.only != "" && r.only != h.kind {
		return false
	}
	if r.d4 {
		return h.d4proxy != nil
	}
	if r.memory || r.name == "d7r" {
		return h.kind == "caddy" && !h.group.cluster
	}
	return true
}

// caddyfile writes h's Caddyfile; extra, when nonzero, is the port of an
// unrelated site written before h's (defect 7).
func caddyfile(h *host, backend string, extra int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "{\n\tadmin 127.0.0.1:%d\n\tpersist_config off\n\tauto_https off\n}\n\n", h.admin)
	if extra != 0 {
		fmt.Fprintf(&b, "http://:%d {\n\tbind 127.0.0.1\n\trespond \"unrelated\"\n}\n\n", extra)
	}
	fmt.Fprintf(&b, "http://:%d {\n\tbind 127.0.0.1\n", h.port)
	for _, r := range h.group.routes {
		if !hasRoute(h, r) {
			continue
		}
		match := r.path
		if r.upstream {
			match += "*"
		}
		fmt.Fprintf(&b, "\thandle %s {\n\t\tsluice {\n", match)
		// The Caddys of a group share their zones through a share group
		// (ga's with the Go service): a zone without one is its site's,
		// and the instances listen on ports of their own. The defect-4
		// and defect-7 zones are c1's own.
		switch {
		case r.memory || strings.HasPrefix(r.name, "d7") || r.d4:
		case h.group.name == "ga":
			b.WriteString("\t\t\tshare g\n")
		default:
			fmt.Fprintf(&b, "\t\t\tshare %s\n", h.group.name)
		}
		for _, z := range r.zones {
			fmt.Fprintf(&b, "\t\t\tzone %s {\n", z.name)
			if z.header != "" {
				fmt.Fprintf(&b, "\t\t\t\tkey {http.request.header.%s}\n", z.header)
			} else {
				b.WriteString("\t\t\t\tkey g\n")
			}
			if z.alg != "" {
				fmt.Fprintf(&b, "\t\t\t\trate %s\n\t\t\t\talgorithm %s\n", z.rateText(), z.alg)
			}
			if z.burst > 0 {
				fmt.Fprintf(&b, "\t\t\t\tburst %s\n", strconv.FormatFloat(z.burst, 'f', -1, 64))
			}
			if z.maxDelay > 0 {
				fmt.Fprintf(&b, "\t\t\t\tmax_delay %s\n", z.maxDelay)
			}
			if z.lease > 0 {
				fmt.Fprintf(&b, "\t\t\t\tlease %s\n", strconv.FormatFloat(z.lease, 'f', -1, 64))
			}
			if z.inflight > 0 {
				fmt.Fprintf(&b, "\t\t\t\tmax_in_flight %d\n", z.inflight)
			}
			if z.fleet > 0 {
				fmt.Fprintf(&b, "\t\t\t\tdemand_scope fleet\n\t\t\t\tdemand_keys %d\n", z.fleet)
			}
			if z.penalty > 0 {
				fmt.Fprintf(&b, "\t\t\t\tpenalty %s\n", z.penalty)
			}
			if z.countStatus != nil {
				fmt.Fprintf(&b, "\t\t\t\tcount_status %s\n", strings.Join(z.countStatus, " "))
			}
			if z.cost > 0 {
				fmt.Fprintf(&b, "\t\t\t\tcost %s\n", fmtNum(z.cost))
			}
			if z.costHeader != "" {
				fmt.Fprintf(&b, "\t\t\t\tcost_header %s\n", z.costHeader)
			}
			if z.costBytes {
				b.WriteString("\t\t\t\tcost_bytes\n")
			}
			b.WriteString("\t\t\t}\n")
		}
		if !r.memory {
			b.WriteString("\t\t\tstore redis {\n")
			switch {
			case r.d4:
				fmt.Fprintf(&b, "\t\t\t\taddress %s\n\t\t\t\tbreaker 2 50ms\n", h.d4proxy.addr)
			case h.group.cluster:
				fmt.Fprintf(&b, "\t\t\t\taddresses %s\n", strings.Join(h.group.redis, " "))
			default:
				fmt.Fprintf(&b, "\t\t\t\taddress %s\n", h.proxy.addr)
			}
			b.WriteString("\t\t\t\treadable_keys\n\t\t\t}\n")
			switch r.policy {
			case "fallback":
				fmt.Fprintf(&b, "\t\t\tfallback local\n\t\t\tinstances %d\n", r.instances(h.group))
			default:
				fmt.Fprintf(&b, "\t\t\ton_store_error %s\n", r.policy)
			}
		}
		b.WriteString("\t\t}\n")
		if r.upstream {
			fmt.Fprintf(&b, "\t\treverse_proxy %s\n", backend)
		} else {
			b.WriteString("\t\trespond \"ok\"\n")
		}
		b.WriteString("\t}\n")
	}
	// What a reload changes: nothing any limit reads.
	fmt.Fprintf(&b, "\thandle /gen {\n\t\trespond \"%d\"\n\t}\n}\n", h.gen)
	return b.String()
}

// traefikDynamic writes h's file-provider configuration.
func traefikDynamic(h *host, backend string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "http:\n  services:\n    backend:\n      loadBalancer:\n        servers:\n          - url: \"http://%s\"\n", backend)
	b.WriteString("  routers:\n")
	fmt.Fprintf(&b, "    ready:\n      rule: \"Path(`/ready`) || Path(`/gen-%d`)\"\n      service: backend\n", h.gen)
	rs := append([]*route(nil), h.group.routes...)
	rs = append(rs, d5Route)
	for _, r := range rs {
		if !hasRoute(h, r) {
			continue
		}
		rule := "Path(`" + r.path + "`)"
		if r.upstream {
			rule = "PathPrefix(`" + r.path + "`)"
		}
		fmt.Fprintf(&b, "    %s:\n      rule: \"%s\"\n      service: backend\n      middlewares: [%s]\n", r.name, rule, r.name)
	}
	b.WriteString("  middlewares:\n")
	for _, r := range rs {
		if !hasRoute(h, r) {
			continue
		}
		fmt.Fprintf(&b, "    %s:\n      plugin:\n        sluice:\n", r.name)
		ind := "          "
		b.WriteString(ind)
		writeTraefikZone(&b, ind, r.zones[0])
		if len(r.zones) > 1 {
			b.WriteString(ind + "limits:\n")
			for _, z := range r.zones[1:] {
				b.WriteString(ind + "  - ")
				writeTraefikZone(&b, ind+"    ", z)
			}
		}
		fmt.Fprintf(&b, "%sredis:\n%s  endpoints: [\"%s\"]\n%s  readableKeys: true\n", ind, ind, h.proxy.addr, ind)
		switch r.policy {
		case "fallback":
			fmt.Fprintf(&b, "%sfallback: local\n%sinstances: %d\n", ind, ind, r.instances(h.group))
		default:
			fmt.Fprintf(&b, "%sonStoreError: %s\n", ind, r.policy)
		}
		if r.name == "d3" {
			fmt.Fprintf(&b, "%smetrics:\n%s  address: \"127.0.0.1:%d\"\n%s  demandScope: fleet\n%s  demandKeys: %d\n", ind, ind, h.metrics, ind, ind, r.zones[0].fleet)
		}
	}
	return b.String()
}

// writeTraefikZone writes z's options at indent ind, its first line
// without it (a list item's dash may precede it).
func writeTraefikZone(b *strings.Builder, ind string, z *zone) {
	first := true
	line := func(format string, args ...interface{}) {
		if !first {
			b.WriteString(ind)
		}
		first = false
		fmt.Fprintf(b, format+"\n", args...)
	}
	line("name: %s", z.name)
	if z.alg != "" {
		line("average: %s", strconv.FormatFloat(z.quota, 'f', -1, 64))
		line("period: %s", durText(z.period))
		line("algorithm: %s", z.alg)
	}
	if z.burst > 0 {
		line("burst: %s", strconv.FormatFloat(z.burst, 'f', -1, 64))
	}
	if z.maxDelay > 0 {
		line("maxDelay: %s", z.maxDelay)
	}
	if z.lease > 0 {
		line("lease: %s", strconv.FormatFloat(z.lease, 'f', -1, 64))
	}
	if z.inflight > 0 {
		line("maxInFlight: %d", z.inflight)
	}
	if z.penalty > 0 {
		line("penalty: %s", z.penalty)
	}
	if z.countStatus != nil {
		line("countStatus: [\"%s\"]", strings.Join(z.countStatus, `", "`))
	}
	if z.cost > 0 || z.costHeader != "" || z.costBytes {
		// Written when 0 too: a limits item takes the top level's cost
		// unless it has its own.
		line("cost: %s", fmtNum(z.cost))
	}
	if z.costHeader != "" {
		line("costHeader: %s", z.costHeader)
	}
	if z.costBytes {
		line("costBytes: true")
	}
	if z.header != "" {
		line("key: [\"header:%s\"]", z.header)
	} else {
		line("key: [\"const:g\"]")
	}
}

// d5Route is defect 5's middleware, in the Traefiks only: lease with
// fallback local and 10 instances, whose share of the burst (10) is below
// the lease (50).
var d5Route = &route{name: "d5", path: "/d5", policy: "fallback", inst: 10, probe: true, only: "traefik", zones: []*zone{
	{name: "d5", alg: "token_bucket", quota: 100, period: time.Second, burst: 100, lease: 50},
}}

// writeConfigs writes every host's configuration into dir and the
// environment file the shell script sources to start them.
func writeConfigs(t *topology) error {
	var env []string
	for _, h := range t.hosts {
		switch h.kind {
		case "caddy":
			h.file = filepath.Join(t.dir, "Caddyfile."+h.name)
			if err := os.WriteFile(h.file, []byte(caddyfile(h, t.backend, 0)), 0o644); err != nil {
				return err
			}
			env = append(env, fmt.Sprintf("%s=%q", strings.ToUpper(h.name), fmt.Sprintf("%s %d %d", h.file, h.port, h.admin)))
		case "traefik":
			dir := filepath.Join(t.dir, "traefik-"+h.name)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			h.file = filepath.Join(dir, "dynamic.yml")
			if err := os.WriteFile(h.file, []byte(traefikDynamic(h, t.backend)), 0o644); err != nil {
				return err
			}
			env = append(env, fmt.Sprintf("%s=%q", strings.ToUpper(h.name), fmt.Sprintf("%s %d", dir, h.port)))
		}
	}
	var caddys, traefiks []string
	for _, h := range t.hosts {
		switch h.kind {
		case "caddy":
			caddys = append(caddys, strings.ToUpper(h.name))
		case "traefik":
			traefiks = append(traefiks, strings.ToUpper(h.name))
		}
	}
	sort.Strings(caddys)
	env = append(env, fmt.Sprintf("CADDYS=%q", strings.Join(caddys, " ")), fmt.Sprintf("TRAEFIKS=%q", strings.Join(traefiks, " ")))
	return os.WriteFile(filepath.Join(t.dir, "hosts.env"), []byte(strings.Join(env, "\n")+"\n"), 0o644)
}
