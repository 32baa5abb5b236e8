// Command promises runs sluice as users deploy it and checks, from the
// outside, every bound README.md and SECURITY.md state, while it breaks
// the network between the hosts and Redis, and Redis itself, on a
// schedule drawn from a seed. e2e/promises.sh builds and starts the hosts
// and runs it; see there for the topology's processes.
//
// The topology: two Caddys and a Go service (sluicehttp, in this process)
// sharing every limit through one Redis and the share group g (group
// ga); two Traefiks, whose middlewares of one name share (group gt), on
// the same Redis; two Caddys on a Redis Cluster of three masters (group
// gk). Every host reaches Redis through a toxiproxy proxy of its own run
// in this process (a Cluster node through its proxy, which it announces
// to clients), so that a fault can break one host's way, a group's, the
// Cluster's, or Redis itself.
//
// The workload is seeded: per group and route (topo.go), Poisson
// arrivals to random hosts with random keys of a few shared ones, over
// every algorithm, several limits per request, lease, max_in_flight,
// shaping with clients that hang up, a penalty, limits that count only
// the upstream's 401 or 4xx, and limits that take their cost from the
// upstream's X-Tokens-Used or its body's bytes; reloads of Caddys (caddy reload) and
// Traefiks (their file-provider configuration rewritten); probes of
// quiet keys. The faults (faults.go): latency, a reply dropped after the
// command was written, resets, blackhole, Redis paused (SIGSTOP), killed
// and started again empty, restarted empty.
//
// Every answer is classified by its headers: decided in Redis (its
// X-RateLimit-Limit is the zone's quota), by the local fallback (the
// instance's share), or by the failure policy (no rate-limit headers);
// the checks (checks.go) hold each documented bound over every interval
// of every key, from the send and answer instants of the requests, and
// the defect checks (defects.go) each reproduce one of a known set of
// broken promises. On a violation it prints the seed, the fault schedule
// and the fewest requests, answers and faults that show it, and exits 1.
//
//	promises -dir DIR -backend 127.0.0.1:PORT -caddy ./caddy [-seed N] [-mode small|long] [-duration D] [-only check,...]
//
// The checks (-only selects some; the defect checks each reproduce one of
// the broken promises of issue 34 and fail on 4906d52):
//
//	answers   no request fails, no 5xx (a connection Caddy's reload drops aside)
//	bound     Redis's admissions per key within B + r·T (token bucket), the quota per
//	          window (fixed window, sliding counter's weighted count) or period (log),
//	          a capacity more per Redis started empty
//	lease     a leased key within B + r·T + instances × lease
//	fallback  each instance's local fallback within its share of the bound
//	slots     the upstream never has more than max_in_flight of a key in progress
//	          (twice that within a request's hold of Redis started empty, its leases lost)
//	solo      a single instance with fallback local and instances 1 never more through an
//	          outage; at 30 s, Redis restarts empty while such an instance holds its slots,
//	          which it does not see: at most twice the limit within the requests' hold
//	shaping   the upstream never sees a shaper faster than its rate (leaky bucket:
//	          1 + r·T, token bucket with max_delay: B + r·T), clients hanging up
//	charge    no request charged twice: Redis's count of a fixed window against the
//	          admissions answered and the answers of unknown fate
//	headers   Remaining, Retry-After and Reset truthful, probed on quiet keys
//	shared    a quota shared by a group's hosts is exact in a window without faults
//	recovery  every answer of a failure policy within a fault or 1.2 s after it
//	penalty   a key a limit with a penalty refused is refused until the penalty ends by
//	          every host sharing the limit (a key a local fallback refused, by that
//	          fallback), Retry-After and t the time left, and admitted again after it
//	counted   a limit that counts only some statuses within its bound on the counted
//	          responses (Redis's and each fallback's), and a key answered only 200,
//	          sent one request at a time, never refused
//	cost      a limit taking its cost from the response (a header or a stream's trailer,
//	          hostile values among them, or the body's bytes; streams cut short after the
//	          first event, by their client or the upstream, charged the cost their header
//	          states, at least the estimate, and sent event by event) within B + r·T + the debt its requests in progress
//	          may leave, costs settled by the docs' rules (Redis's and each fallback's); a
//	          key sent one request at a time refused while in debt, Retry-After and t the
//	          time the rate repays it, admitted once that has passed; a hostile header never
//	          cheaper than the estimate nor dearer than the capacity
//	defect1   charge on the Cluster, where a dropped reply made go-redis send a decision again
//	defect2   a repeated key header with a changing second line mints no key
//	defect3   demand_scope fleet keeps at most demand_keys keys per period in Redis, for a
//	          bounded time, and a period of 12 years does not overflow its expiry
//	defect4   an answer from a lease does not close the breaker while Redis is down
//	defect5   lease with fallback local loads when the share is below the lease
//	defect6   Traefik's metrics listener closes idle and slow connections within 90 s
//	defect7   an unrelated site added before a zone's keeps its counters across a reload
//
// It writes the hosts' configurations and DIR/hosts.env, starts Redis,
// the Cluster, the proxies and the Go service, creates DIR/proxies.ready
// and waits (5 minutes at most) for DIR/hosts.ready, which the script
// creates once the Caddys and Traefiks run.
package main

import (
	"flag"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// topology is the run: its processes, its clock and what it recorded.
type topology struct {
	dir, backend, caddyBin string
	dump                   string // the file every answer is written to, if any
	long                   bool
	seed                   int64
	start                  time.Time

	redis     *redisServer
	cluster   *cluster
	hosts     []*host
	byName    map[string]*host
	groups    map[string]*group
	groupList []*group
	faults    []*fault
	reloads   []*reload
	rc        recorder
	stalls    stallWatch
	// redisWatches measure each Redis server's answers to PING.
	redisWatches []*redisWatch

	mu       sync.Mutex
	restarts []restartEvent // Redis started empty
}

// restartEvent is Redis (the standalone server, or a Cluster node)
// killed at an instant, to start again empty.
type restartEvent struct {
	at      time.Duration
	cluster bool
}

// reload is a host's configuration reloaded.
type reload struct {
	at   time.Duration
	h    *host
	done time.Duration
	err  string
}

func (t *topology) since() time.Duration { return time.Since(t.start) }

// emptied records that f lost Redis's state at at.
func (t *topology) emptied(f *fault, at time.Duration) {
	t.mu.Lock()
	t.restarts = append(t.restarts, restartEvent{at: at, cluster: f.target != "redis"})
	t.mu.Unlock()
}

// checkNames are the checks -only selects, in report order.
var checkNames = []string{"answers", "bound", "lease", "fallback", "slots", "solo", "shaping", "charge", "headers", "shared", "recovery", "penalty", "counted", "cost",
	"defect1", "defect2", "defect3", "defect4", "defect5", "defect6", "defect7"}

func main() {
	dir := flag.String("dir", "", "the run's directory (configurations, Redis's files)")
	backend := flag.String("backend", "", "host:port of e2e/backend")
	caddyBin := flag.String("caddy", "./caddy", "the Caddy binary, for caddy reload and caddy validate")
	seed := flag.Int64("seed", 0, "the seed of the workload and the faults; 0: from the clock")
	mode := flag.String("mode", "small", "small (about 100 s of load, CI) or long (30 minutes, about a million requests)")
	duration := flag.Duration("duration", 0, "the load's length; 0: the mode's")
	only := flag.String("only", "", "comma-separated checks to run (default all): "+strings.Join(checkNames, ", "))
	noCluster := flag.Bool("no-cluster", false, "run without the Redis Cluster (group gk, defect1)")
	noTraefik := flag.Bool("no-traefik", false, "run without the Traefiks (group gt)")
	dump := flag.String("dump", "", "write every request, answer and fault of the run to this file")
	servePort := flag.Int("service-port", 0, "internal: serve the Go service of group ga on this port instead (with -service-redis, -service-instances, -backend)")
	serveRedis := flag.String("service-redis", "", "internal: the Go service's Redis address")
	serveInstances := flag.Int("service-instances", 3, "internal: the Go service's fallback instances")
	flag.Parse()
	if *servePort != 0 {
		serveService(*servePort, *serveRedis, *serveInstances, *backend)
		return
	}
	if *dir == "" || *backend == "" {
		fmt.Fprintln(os.Stderr, "promises: -dir and -backend are required")
		os.Exit(2)
	}
	if *seed == 0 {
		*seed = time.Now().UnixNano() % 1000000
	}
	sel := map[string]bool{}
	for _, c := range strings.Split(*only, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		known := false
		for _, n := range checkNames {
			known = known || n == c
		}
		if !known {
			fmt.Fprintf(os.Stderr, "promises: -only: unknown check %q (want %s)\n", c, strings.Join(checkNames, ", "))
			os.Exit(2)
		}
		sel[c] = true
	}
	d, scale := 100*time.Second, 1.0
	if *mode == "long" {
		d, scale = 30*time.Minute, 2.6
	} else if *mode != "small" {
		fmt.Fprintln(os.Stderr, "promises: -mode: small or long")
		os.Exit(2)
	}
	if *duration > 0 {
		d = *duration
	}
	t := &topology{dir: *dir, backend: *backend, caddyBin: *caddyBin, long: *mode == "long", seed: *seed}
	fmt.Printf("promises: seed %d, mode %s, load %v\n", *seed, *mode, d)
	stop, err := t.setup(!*noCluster, !*noTraefik)
	if stop != nil {
		defer stop()
	}
	if err != nil {
		fmt.Println("FAIL: promises: setup:", err)
		if stop != nil {
			stop()
		}
		os.Exit(1)
	}
	t.dump = *dump
	ok := t.run(sel, d, scale)
	if stop != nil {
		stop()
	}
	if !ok {
		os.Exit(1)
	}
}

// setup starts Redis, the Cluster, the proxies and the Go service, writes
// the hosts' configurations and waits for the hosts; stop ends what it
// started.
func (t *topology) setup(withCluster, withTraefik bool) (stop func(), err error) {
	var stops []func()
	stop = func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		stops = nil
	}
	port, err := freePort()
	if err != nil {
		return stop, err
	}
	t.redis = newRedis(t.dir, port)
	if err := t.redis.start(); err != nil {
		return stop, err
	}
	stops = append(stops, t.redis.stop)
	if withCluster {
		c, err := startCluster(t.dir)
		if c != nil {
			stops = append(stops, func() {
				for _, n := range c.nodes {
					n.stop()
				}
			})
		}
		if err != nil {
			return stop, err
		}
		t.cluster = c
	}
	t.byName, t.groups = map[string]*host{}, map[string]*group{}
	mk := func(name string, cluster bool, hosts ...string) error {
		g := &group{name: name, cluster: cluster}
		g.routes = append(g.routes, routes...)
		if !cluster {
			g.routes = append(g.routes, defectRoutes...)
		}
		for _, hn := range hosts {
			h := &host{name: hn, group: g}
			switch hn[0] {
			case 'c':
				h.kind = "caddy"
			case 't':
				h.kind = "traefik"
			default:
				h.kind = "service"
			}
			var err error
			if h.port, err = freePort(); err != nil {
				return err
			}
			if h.kind == "caddy" {
				if h.admin, err = freePort(); err != nil {
					return err
				}
			}
			if h.kind == "traefik" {
				if h.metrics, err = freePort(); err != nil {
					return err
				}
			}
			if cluster {
				if len(g.redis) == 0 {
					for _, p := range t.cluster.proxies {
						g.redis = append(g.redis, p.addr)
					}
				}
			} else {
				if h.proxy, err = newProxy(hn, t.redis.addr()); err != nil {
					return err
				}
				g.redis = append(g.redis, h.proxy.addr)
				if hn == "c1" {
					if h.d4proxy, err = newProxy("c1-d4", t.redis.addr()); err != nil {
						return err
					}
				}
			}
			g.hosts = append(g.hosts, h)
			t.hosts = append(t.hosts, h)
			t.byName[hn] = h
		}
		t.groups[name] = g
		t.groupList = append(t.groupList, g)
		return nil
	}
	if err := mk("ga", false, "c1", "c2", "svc"); err != nil {
		return stop, err
	}
	if withTraefik {
		if err := mk("gt", false, "t1", "t2"); err != nil {
			return stop, err
		}
	}
	if withCluster {
		if err := mk("gk", true, "c3", "c4"); err != nil {
			return stop, err
		}
	}
	if err := writeConfigs(t); err != nil {
		return stop, err
	}
	closeSvc, err := t.startService(t.byName["svc"])
	if closeSvc != nil {
		stops = append(stops, closeSvc)
	}
	if err != nil {
		return stop, err
	}
	if err := os.WriteFile(filepath.Join(t.dir, "proxies.ready"), nil, 0o644); err != nil {
		return stop, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		if _, err := os.Stat(filepath.Join(t.dir, "hosts.ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return stop, fmt.Errorf("the hosts were not ready within 5 minutes (no %s)", filepath.Join(t.dir, "hosts.ready"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return stop, nil
}

// warm waits until every host answers from Redis (60 s at most), so that
// the run starts with every connection made, and again after a request
// of every route at once: decisions that this burst made time out on a
// busy machine may have opened a host's breaker, which must not be the
// run's.
func (t *topology) warm() error {
	t.start = time.Now()
	var probe *route
	for _, r := range routes {
		if r.name == "ptb" {
			probe = r
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	fromRedis := func() error {
		for _, h := range t.hosts {
			for {
				x := t.send(h, probe, "warm-"+h.name, 0, nil)
				if x.cls == classRedis {
					break
				}
				if time.Now().After(deadline) {
					return fmt.Errorf("%s does not answer from Redis after 60 s: %s", h.name, x)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		return nil
	}
	if err := fromRedis(); err != nil {
		return err
	}
	// Every route of every host once, so that the stores' connections
	// are open when the load starts.
	var wg sync.WaitGroup
	for _, h := range t.hosts {
		for _, r := range h.group.routes {
			if hasRoute(h, r) && !r.d4 && !strings.HasPrefix(r.name, "d") {
				wg.Add(1)
				go func(h *host, r *route) {
					defer wg.Done()
					t.send(h, r, "warm-"+h.name, 0, nil)
				}(h, r)
			}
		}
	}
	wg.Wait()
	time.Sleep(time.Second)
	return fromRedis()
}

// run runs the workload, the faults, the probes and the defect scenarios
// selected, checks and reports; it reports whether every check passed.
func (t *topology) run(sel map[string]bool, d time.Duration, scale float64) bool {
	want := func(c string) bool { return len(sel) == 0 || sel[c] }
	wantAny := func(cs ...string) bool {
		for _, c := range cs {
			if want(c) {
				return true
			}
		}
		return false
	}
	if err := t.warm(); err != nil {
		fmt.Println("FAIL: promises: warm-up:", err)
		return false
	}
	rnd := rand.New(rand.NewSource(t.seed))
	general := wantAny("answers", "bound", "lease", "fallback", "slots", "solo", "shaping", "charge", "headers", "shared", "recovery", "penalty", "counted", "cost", "defect1")
	if !general {
		d = 0
	}
	if general {
		t.faults = schedule(rand.New(rand.NewSource(rnd.Int63())), d, t)
	}
	ps := []planned(nil)
	if general {
		ps = plan(rand.New(rand.NewSource(rnd.Int63())), t, d, scale)
	}
	reloadRnd := rand.New(rand.NewSource(rnd.Int63()))
	fmt.Printf("promises: %d requests planned over %v, %d faults:\n", len(ps), d, len(t.faults))
	for _, f := range t.faults {
		fmt.Println("  ", f)
	}
	t.rc = recorder{}
	t.start = time.Now()
	stopStalls := make(chan struct{})
	defer close(stopStalls)
	go t.stalls.run(t, stopStalls)
	t.redisWatches = append(t.redisWatches, &redisWatch{addr: t.redis.addr()})
	if t.cluster != nil {
		for _, n := range t.cluster.nodes {
			t.redisWatches = append(t.redisWatches, &redisWatch{addr: n.addr(), cluster: true})
		}
	}
	for _, w := range t.redisWatches {
		go w.run(t, stopStalls)
	}
	var wg sync.WaitGroup
	stopProbes := make(chan struct{})
	d6 := (*defect6)(nil)
	if want("defect6") {
		d6 = t.openIdle()
	}
	var defects []*defectResult
	var dmu sync.Mutex
	addDefect := func(r *defectResult) {
		dmu.Lock()
		defects = append(defects, r)
		dmu.Unlock()
	}
	if general {
		for _, f := range t.faults {
			wg.Add(1)
			go func(f *fault) {
				defer wg.Done()
				t.apply(f)
			}(f)
		}
		// Reloads, every 15 to 30 s, of a random Caddy or Traefik.
		for at := 15 * time.Second; at < d-10*time.Second; at += time.Duration(15+reloadRnd.Intn(15)) * time.Second {
			var hs []*host
			for _, h := range t.hosts {
				if h.kind != "service" {
					hs = append(hs, h)
				}
			}
			rl := &reload{at: at, h: hs[reloadRnd.Intn(len(hs))]}
			t.reloads = append(t.reloads, rl)
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(time.Until(t.start.Add(rl.at)))
				t.reload(rl)
			}()
		}
		if want("headers") {
			n := 0
			for _, g := range t.groupList {
				for _, r := range g.routes {
					if r.probe && strings.HasPrefix(r.path, "/probe/") {
						wg.Add(1)
						go func(g *group, r *route, delay time.Duration) {
							defer wg.Done()
							t.probeLoop(g, r, delay, stopProbes)
						}(g, r, time.Duration(n)*150*time.Millisecond)
						n++
					}
				}
			}
		}
		if want("counted") {
			for _, g := range t.groupList {
				for _, r := range g.routes {
					if r.steady > 0 {
						wg.Add(1)
						go func(g *group, r *route) {
							defer wg.Done()
							t.uncountedLoop(g, r, stopProbes)
						}(g, r)
					}
				}
			}
		}
		if want("cost") {
			for i, g := range t.groupList {
				for _, r := range g.routes {
					if r.costs {
						wg.Add(1)
						go func(g *group, r *route, rnd *rand.Rand) {
							defer wg.Done()
							t.debtLoop(g, r, rnd, stopProbes)
						}(g, r, rand.New(rand.NewSource(t.seed+int64(i))))
					}
				}
			}
		}
		if want("solo") && d > soloAt+10*time.Second {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.soloScenario()
			}()
		}
		if want("charge") || want("defect1") {
			wg.Add(1)
			go func() {
				defer wg.Done()
				t.readCharges(d)
			}()
		}
	}
	// The defect scenarios that run during the load.
	if want("defect2") {
		wg.Add(1)
		go func() { defer wg.Done(); addDefect(t.defect2()) }()
	}
	if want("defect3") {
		wg.Add(1)
		go func() { defer wg.Done(); addDefect(t.defect3()) }()
	}
	if want("defect4") {
		wg.Add(1)
		go func() { defer wg.Done(); addDefect(t.defect4()) }()
	}
	if general {
		t.runLoad(ps, nil)
	}
	close(stopProbes)
	wg.Wait()
	loadEnd := t.since()
	// After the load: defect 7 reloads a Caddy with a site added before
	// its own, which would change every zone's identity on 4906d52.
	if want("defect7") {
		addDefect(t.defect7())
	}
	// Defect 5 runs caddy validate, a process as heavy as a Caddy's
	// start: after the load, not to stall it.
	if want("defect5") {
		addDefect(t.defect5())
	}
	if d6 != nil {
		addDefect(d6.verdict(t))
	}
	fmt.Printf("promises: load done at %.1fs; %d answers\n", loadEnd.Seconds(), len(t.rc.all()))
	if t.dump != "" {
		if err := t.writeDump(); err != nil {
			fmt.Println("promises: -dump:", err)
		}
	}
	vs, figs := t.evaluate(sel)
	sort.Slice(defects, func(i, j int) bool { return defects[i].name < defects[j].name })
	return t.report(sel, vs, figs, defects)
}

// reload reloads h's configuration, changed where no limit reads it.
func (t *topology) reload(rl *reload) {
	h := rl.h
	h.gen++
	var err error
	switch h.kind {
	case "caddy":
		err = t.caddyReload(h, 0)
	case "traefik":
		// Written aside and renamed into place: Traefik's watcher must
		// never read a file half written (its routers then answer 404).
		tmp := h.file + ".new"
		err = os.WriteFile(tmp, []byte(traefikDynamic(h, t.backend)), 0o644)
		if err == nil {
			err = os.Rename(tmp, h.file)
		}
		if err == nil {
			// Traefik applies it within its watcher's throttle.
			err = waitStatus(h.url("/gen-"+strconv.Itoa(h.gen)), 200, 10*time.Second)
		}
	}
	rl.done = t.since()
	if err != nil {
		rl.err = err.Error()
	}
}

// caddyReload writes h's Caddyfile (with an unrelated site first on port
// extra, when nonzero) and loads it with caddy reload.
func (t *topology) caddyReload(h *host, extra int) error {
	if err := os.WriteFile(h.file, []byte(caddyfile(h, t.backend, extra)), 0o644); err != nil {
		return err
	}
	return runCmd(30*time.Second, t.caddyBin, "reload", "--config", h.file, "--adapter", "caddyfile", "--address", "127.0.0.1:"+strconv.Itoa(h.admin))
}

// waitStatus waits until GET url answers status, at most d.
func waitStatus(url string, status int, d time.Duration) error {
	deadline := time.Now().Add(d)
	last := 0
	for time.Now().Before(deadline) {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if last = resp.StatusCode; last == status {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("GET %s: %d, not %d, after %v", url, last, status, d)
}

// fetch GETs url (or sends method) and returns the status and body.
func fetch(method, url string) (int, string, error) {
	req, _ := http.NewRequest(method, url, nil)
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 32*1024)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String(), nil
}
