package main

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/sluicehttp"
)

// defectResult is the verdict of one defect scenario.
type defectResult struct {
	name         string
	promise      string
	problems     []string
	inconclusive string // why the scenario could not tell
	notes        []string
	recs         []*rec
}

func (d *defectResult) failf(format string, args ...interface{}) {
	d.problems = append(d.problems, fmt.Sprintf(format, args...))
}

func (d *defectResult) notef(format string, args ...interface{}) {
	d.notes = append(d.notes, fmt.Sprintf(format, args...))
}

// routeNamed returns g's route of that name.
func routeNamed(g *group, name string) *route {
	for _, r := range g.routes {
		if r.name == name {
			return r
		}
	}
	return nil
}

// sleepUntil sleeps until the run's instant at.
func (t *topology) sleepUntil(at time.Duration) { time.Sleep(time.Until(t.start.Add(at))) }

// defect2: a request whose key header comes twice, the second line
// changing, must not get a fresh key each time: a limit of 2 per hour
// keyed on X-API-Key admits at most 2 of 6 such requests, spread over
// the hosts of a group (Caddy and the Go service share the quota).
func (t *topology) defect2() *defectResult {
	res := &defectResult{name: "defect2", promise: "a repeated key header with a changing second line mints no key; Caddy and the Go service share the quota"}
	t.sleepUntil(2 * time.Second)
	for _, gn := range []string{"ga", "gt"} {
		g := t.groups[gn]
		if g == nil {
			continue
		}
		r := routeNamed(g, "d2")
		decided := false
		for try := 0; try < 5 && !decided; try++ {
			first := fmt.Sprintf("%s-d2-%d-%d", gn, t.seed, try)
			admitted, clean := 0, true
			var got []string
			for i := 0; i < 6; i++ {
				h := g.hosts[i%len(g.hosts)]
				x := t.send(h, r, first, 0, http.Header{"X-Api-Key": {first, fmt.Sprintf("mint-%d-%d", try, i)}})
				res.recs = append(res.recs, x)
				if x.cls != classRedis {
					clean = false
				}
				if x.admitted() {
					admitted++
				}
				got = append(got, fmt.Sprintf("%s:%d", h.name, x.code))
			}
			if !clean {
				continue
			}
			decided = true
			if admitted > 2 {
				res.failf("%s: 6 requests with X-API-Key %q and a second, changing X-API-Key line, over %s: %d admitted by a limit of 2 per hour (%s)",
					gn, first, hostNames(g.hosts), admitted, strings.Join(got, " "))
			} else {
				res.notef("%s: %d of 6 admitted (%s)", gn, admitted, strings.Join(got, " "))
			}
		}
		if !decided {
			res.inconclusive = gn + ": no try answered from Redis only"
		}
	}
	return res
}

// defect3: a zone whose demand is recorded for the fleet (demand_keys
// 32) keeps in Redis at most demand_keys keys per period however many
// one-off keys ask, each period's hash living at most the 26 periods and
// 3.1 s README states (after the last fault: the parts of an instance
// that cannot reach Redis are lost); and a period of 12 years does not make Redis
// delete what a reset writes (a negative PEXPIRE).
func (t *topology) defect3() *defectResult {
	res := &defectResult{name: "defect3", promise: "demand_scope fleet keeps Redis within demand_keys per period, for a bounded time"}
	const keys = 200
	// Start at the beginning of a period, once the last fault of the
	// standalone Redis's hosts has ended (parts that cannot be sent are
	// lost), so that the one-off keys fall in one.
	p := routeNamed(t.groups["ga"], "d3").zones[0].period
	after := 5 * time.Second
	for _, f := range t.faults {
		if _, b := f.window(); b+time.Second > after && f.target != "cluster" && !strings.HasPrefix(f.target, "node:") {
			after = b + time.Second
		}
	}
	begin := t.start.Add(after).Truncate(p).Add(p)
	time.Sleep(time.Until(begin))
	var wg sync.WaitGroup
	for _, gn := range []string{"ga", "gt"} {
		g := t.groups[gn]
		if g == nil {
			continue
		}
		r := routeNamed(g, "d3")
		var hs []*host
		for _, h := range g.hosts {
			if h.kind != "service" {
				hs = append(hs, h)
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < keys; i++ {
				t.send(hs[i%len(hs)], r, fmt.Sprintf("%s-once-%d-%d", gn, t.seed, i), 0, nil)
			}
		}()
	}
	wg.Wait()
	// The period's parts are folded 0.1 s after its end and sent within
	// the flush delay; wait for the end of the period the last key asked
	// in, and 4 s more.
	end := time.Now().Truncate(p).Add(p)
	time.Sleep(time.Until(end.Add(4 * time.Second)))
	// A period's demand is at <zone's base><period> (a hash of keys), or,
	// with the keys kept apart from a sketch of those evicted,
	// <base>keys:<period> and <base>evicted:<period>: the keys at most
	// demand_keys, the sketch at most its buckets (580) and three fields.
	stored, err := redisScan(t.redis.addr(), "*{d3:*:demand:*")
	if err != nil {
		res.inconclusive = "SCAN: " + err.Error()
		return res
	}
	most := int64(26*p/time.Millisecond) + 3100 + 1000
	total := int64(0)
	for _, k := range stored {
		if strings.HasSuffix(k, ":since") {
			continue
		}
		n, err := redisSize(t.redis.addr(), k)
		if err != nil {
			res.inconclusive = err.Error()
			return res
		}
		ttl, _ := redisDo(t.redis.addr(), "PTTL", k)
		pt, _ := ttl.(int64)
		bound, what := int64(d3Keys), "keys, more than demand_keys"
		if strings.Contains(k, ":evicted:") {
			bound, what = 583, "fields of a sketch, more than its 580 buckets and 3"
		} else {
			total += n
		}
		if n > bound {
			res.failf("the demand key %s holds %d %s %d (%d one-off keys asked in one period of each fleet)", k, n, what, bound, keys)
		}
		if pt < 0 || pt > most {
			res.failf("the demand key %s lives %d ms more, not within 26 periods of %v and 3.1 s (%d ms)", k, pt, p, most)
		}
	}
	if len(stored) == 0 {
		res.failf("no demand of zone d3 in Redis after %d keys asked in each of two fleets", keys)
	}
	res.notef("%d demand keys of zone d3 in Redis, holding %d keys in all, after %d one-off keys in each fleet (demand_keys %d)", len(stored), total, keys, d3Keys)
	// A period of 12 years: the reset's key must live.
	c1 := t.byName["c1"]
	code, body, err := fetch("DELETE", fmt.Sprintf("http://127.0.0.1:%d/sluice/zones/d3y/advice", c1.admin))
	if err != nil || code/100 != 2 {
		res.failf("DELETE of the advice of zone d3y (a period of 12 years) fails: %d %v %s", code, err, strings.TrimSpace(body))
		return res
	}
	since, err := redisScan(t.redis.addr(), "*{d3y:*:demand:*:since")
	if err != nil {
		res.inconclusive = "SCAN: " + err.Error()
		return res
	}
	if len(since) == 0 {
		res.failf("after a DELETE of the advice of a zone whose period is 12 years, Redis holds no reset instant (a negative PEXPIRE deleted it)")
		return res
	}
	ttl, _ := redisDo(t.redis.addr(), "PTTL", since[0])
	if pt, _ := ttl.(int64); pt <= 0 && pt != -1 {
		res.failf("the reset instant %s of a zone whose period is 12 years has PTTL %v", since[0], ttl)
	}
	return res
}

// defect4: an answer served from a lease is no answer from Redis: with
// Redis unreachable (every connection reset), the breaker once open must
// not close again. Caddy c1's defect-4 routes (a leased zone and a plain
// one, breaker 2 50ms) reach Redis through a proxy of their own; their
// breaker's gauge is read from Caddy's /metrics every 10 ms.
func (t *topology) defect4() *defectResult {
	res := &defectResult{name: "defect4", promise: "only an answer from Redis moves the breaker: a lease-served answer does not close it while Redis is down"}
	c1 := t.byName["c1"]
	lr, xr := routeNamed(c1.group, "d4l"), routeNamed(c1.group, "d4x")
	label := `sluice_store_breaker_state{store="redis ` + c1.d4proxy.addr + `/0"}`
	state := func() int {
		_, body, err := fetch("GET", fmt.Sprintf("http://127.0.0.1:%d/metrics", c1.admin))
		if err != nil {
			return -1
		}
		for _, line := range strings.Split(body, "\n") {
			if strings.HasPrefix(line, label) {
				v, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, label)), 64)
				if err == nil {
					return int(v)
				}
			}
		}
		return -1
	}
	decided := 0
	for rep := 0; rep < 3; rep++ {
		t.sleepUntil(time.Duration(8+12*rep) * time.Second)
		// A lease grows with the key's demand: 200 requests a second.
		for i := 0; i < 200; i++ {
			go t.send(c1, lr, "g", 0, nil)
			time.Sleep(5 * time.Millisecond)
		}
		name := fmt.Sprintf("d4-%d", rep)
		if err := c1.d4proxy.add(name, "reset_peer", "upstream", `{"timeout":0}`); err != nil {
			res.inconclusive = err.Error()
			return res
		}
		on := t.since()
		var wg sync.WaitGroup
		for i := 0; i < 4; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); t.send(c1, xr, "g", 0, nil) }()
		}
		wg.Wait()
		var samples []int
		var at []time.Duration
		stop := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				select {
				case <-stop:
					return
				default:
				}
				samples = append(samples, state())
				at = append(at, t.since())
				time.Sleep(10 * time.Millisecond)
			}
		}()
		leased := 0
		for i := 0; i < 80; i++ {
			if x := t.send(c1, lr, "g", 0, nil); x.cls == classRedis {
				leased++
			}
			time.Sleep(10 * time.Millisecond)
		}
		close(stop)
		<-done
		c1.d4proxy.remove(name)
		off := t.since()
		opened, closedAt := false, time.Duration(-1)
		for i, s := range samples {
			if s >= 1 {
				opened = true
			}
			if opened && s == 0 && closedAt < 0 {
				closedAt = at[i]
			}
		}
		if !opened {
			res.notef("repetition %d: the breaker's gauge never read open (%v)", rep, samples)
			continue
		}
		decided++
		if closedAt >= 0 {
			res.failf("repetition %d: every connection to Redis reset from %.3fs to %.3fs, yet the breaker read closed at %.3fs after it had opened, while %d answers came from a lease", rep, on.Seconds(), off.Seconds(), closedAt.Seconds(), leased)
		} else {
			res.notef("repetition %d: the breaker stayed open or half-open while Redis was unreachable (%d lease answers)", rep, leased)
		}
	}
	if decided == 0 {
		res.inconclusive = "the breaker never opened"
	}
	return res
}

// defect5: lease with fallback local loads when the quota divided among
// the instances is below the lease (burst 100, lease 50, instances 10),
// in Caddy (caddy validate), the Go service (sluicehttp.New) and Traefik
// (the middleware d5 answers).
func (t *topology) defect5() *defectResult {
	res := &defectResult{name: "defect5", promise: "lease with fallback local loads whatever the instances (burst 100, lease 50, instances 10)"}
	file := filepath.Join(t.dir, "d5.Caddyfile")
	cf := fmt.Sprintf("{\n\tadmin off\n}\nhttp://127.0.0.1:1 {\n\tsluice {\n\t\tzone d5 {\n\t\t\tkey g\n\t\t\trate 100/1s\n\t\t\tburst 100\n\t\t\tlease 50\n\t\t}\n\t\tstore redis {\n\t\t\taddress %s\n\t\t}\n\t\tfallback local\n\t\tinstances 10\n\t}\n\trespond \"ok\"\n}\n", t.redis.addr())
	if err := os.WriteFile(file, []byte(cf), 0o644); err != nil {
		res.inconclusive = err.Error()
		return res
	}
	if err := runCmd(60*time.Second, t.caddyBin, "validate", "--config", file, "--adapter", "caddyfile"); err != nil {
		res.failf("Caddy refuses the config: %v", err)
	}
	mw, err := sluicehttp.New(sluicehttp.Config{Limits: []sluicehttp.Limit{{Name: "d5", Rate: "100/1s", Burst: 100, Lease: 50, Key: []string{"const:g"}}},
		Redis: &sluicehttp.Redis{Addr: t.redis.addr()}, Fallback: "local", Instances: 10})
	if err != nil {
		res.failf("sluicehttp.New refuses the config: %v", err)
	} else {
		mw.Close()
	}
	t1 := t.byName["t1"]
	if t1 == nil {
		return res
	}
	var x *rec
	for i := 0; i < 20; i++ {
		x = t.send(t1, d5Route, "g", 0, nil)
		if x.cls == classRedis {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	res.recs = append(res.recs, x)
	if x.cls != classRedis || !x.admitted() {
		res.failf("Traefik's middleware d5 does not answer from its limit: %s", x)
	}
	return res
}

// portBelow returns a free loopback port of five digits below p.
func portBelow(p int) (int, error) {
	for q := p - 1; q >= 10000 && q > p-2000; q-- {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(q)); err == nil {
			l.Close()
			return q, nil
		}
	}
	return 0, fmt.Errorf("no free port of five digits below %d", p)
}

// runCmd runs a command, failing with its output.
func runCmd(d time.Duration, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	done := make(chan error, 1)
	var out []byte
	go func() {
		var err error
		out, err = cmd.CombinedOutput()
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, lastLines(string(out), 5))
		}
		return nil
	case <-time.After(d):
		cmd.Process.Kill()
		return fmt.Errorf("%s %s: no end within %v", name, strings.Join(args, " "), d)
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// defect6 holds connections to a Traefik metrics listener: one idle
// after a complete request (keep-alive), one sending its request's
// headers a byte every 2 s. Each must be closed by the server within
// tens of seconds (90 s here).
type defect6 struct {
	opened time.Duration
	mu     sync.Mutex
	closed map[string]time.Duration
	errs   []string
}

// d6Bound is how long a connection to the metrics listener may stay idle
// or slow: tens of seconds.
const d6Bound = 90 * time.Second

func (t *topology) openIdle() *defect6 {
	d := &defect6{opened: t.since(), closed: map[string]time.Duration{}}
	if t.byName["t1"] == nil {
		d.errs = append(d.errs, "no Traefik")
		return d
	}
	addr := "127.0.0.1:" + strconv.Itoa(t.byName["t1"].metrics)
	watch := func(name string, c net.Conn, r *bufio.Reader) {
		buf := make([]byte, 512)
		for {
			c.SetReadDeadline(time.Now().Add(d6Bound + time.Minute))
			if _, err := r.Read(buf); err != nil {
				d.mu.Lock()
				d.closed[name] = t.since()
				d.mu.Unlock()
				c.Close()
				return
			}
		}
	}
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		r := bufio.NewReader(c)
		c.Write([]byte("GET /metrics HTTP/1.1\r\nHost: metrics\r\n\r\n"))
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if resp, err := http.ReadResponse(r, nil); err == nil {
			var sink [4096]byte
			for {
				if _, err := resp.Body.Read(sink[:]); err != nil {
					break
				}
			}
			resp.Body.Close()
			go watch("idle after a request", c, r)
		} else {
			d.errs = append(d.errs, "GET /metrics: "+err.Error())
			c.Close()
		}
	} else {
		d.errs = append(d.errs, err.Error())
	}
	if c, err := net.DialTimeout("tcp", addr, 2*time.Second); err == nil {
		go func() {
			req := "GET /metrics HTTP/1.1\r\nHost: metrics\r\nX-Slow: " + strings.Repeat("x", 200) + "\r\n\r\n"
			for i := 0; i < len(req); i++ {
				if _, err := c.Write([]byte{req[i]}); err != nil {
					return
				}
				time.Sleep(2 * time.Second)
			}
		}()
		go watch("slow headers", c, bufio.NewReader(c))
	} else {
		d.errs = append(d.errs, err.Error())
	}
	return d
}

// verdict waits until d6Bound has passed since the connections opened
// and reports which the server kept open.
func (d *defect6) verdict(t *topology) *defectResult {
	res := &defectResult{name: "defect6", promise: "the Traefik metrics listener closes idle and slow connections within tens of seconds"}
	if len(d.errs) > 0 {
		res.inconclusive = strings.Join(d.errs, "; ")
		return res
	}
	t.sleepUntil(d.opened + d6Bound + time.Second)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, name := range []string{"idle after a request", "slow headers"} {
		switch at, ok := d.closed[name]; {
		case !ok:
			res.failf("%s: still open %v after it was opened", name, d6Bound)
		case at-d.opened > d6Bound:
			res.failf("%s: closed by Traefik only after %.1f s, more than %v", name, (at - d.opened).Seconds(), d6Bound)
		default:
			res.notef("%s: closed by Traefik after %.1f s", name, (at - d.opened).Seconds())
		}
	}
	return res
}

// defect7: a Caddy zone's counters do not hang on the name Caddy gives
// its server: after a reload that adds an unrelated site before the
// zone's, a key spent in memory and in Redis stays spent. (Whether two
// instances whose Caddyfiles differ share a zone without a share group
// depends on their sites, which listen on ports of their own here: the
// zones of the other groups' Caddys name a share group.)
func (t *topology) defect7() *defectResult {
	res := &defectResult{name: "defect7", promise: "adding an unrelated site before a zone's site and reloading Caddy keeps its counters, in memory and in Redis"}
	c1 := t.byName["c1"]
	mr, rr := routeNamed(c1.group, "d7m"), routeNamed(c1.group, "d7r")
	key := fmt.Sprintf("d7-%d", t.seed)
	seq := func(steps []*host, r *route) []int {
		var codes []int
		for _, h := range steps {
			x := t.send(h, r, key, 0, nil)
			res.recs = append(res.recs, x)
			codes = append(codes, x.code)
		}
		return codes
	}
	m := seq([]*host{c1, c1, c1, c1}, mr)
	rd := seq([]*host{c1, c1, c1, c1}, rr)
	if fmt.Sprint(m) != "[200 200 200 429]" || fmt.Sprint(rd) != "[200 200 200 429]" {
		res.inconclusive = fmt.Sprintf("spending the key before the reload: memory %v, Redis %v, want [200 200 200 429]", m, rd)
		return res
	}
	// Caddy names its servers srv0, srv1, ... in the order of their
	// listener addresses, sorted as strings: an unrelated site on a port
	// that sorts before c1's (as many digits, a lower number) makes c1's
	// site srv1.
	extra, err := portBelow(c1.port)
	if err == nil {
		c1.gen++
		err = t.caddyReload(c1, extra)
	}
	if err != nil {
		res.inconclusive = "reload: " + err.Error()
		return res
	}
	res.notef("c1 reloaded with a site on port %d, whose listener sorts before its own", extra)
	if x := t.send(c1, mr, key, 0, nil); x.code != 429 {
		res.recs = append(res.recs, x)
		res.failf("memory: the key spent before the reload is admitted after it (%d): its counters restarted", x.code)
	}
	if x := t.send(c1, rr, key, 0, nil); x.code != 429 {
		res.recs = append(res.recs, x)
		res.failf("Redis: the key spent before the reload is admitted after it (%d): the zone counts under another Redis key", x.code)
	}
	return res
}
