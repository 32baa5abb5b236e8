// Command outage sends a steady load to endpoints limited in Redis while
// it breaks Redis on a fixed schedule, and checks that every answer follows
// the endpoint's failure policy within a bounded time:
//
//	0 s    load starts; decisions come from Redis
//	1 s    SCRIPT FLUSH          (the scripts must be reloaded)
//	2 s    CLIENT KILL TYPE normal (every connection is dropped)
//	3 s    SIGSTOP redis-server  (hung: connections open, no answers)
//	5 s    SIGCONT
//	6 s    SIGKILL               (gone)
//	8 s    -restart runs          (a fresh, empty Redis on the same port)
//	11 s   load stops
//
//	outage -redis 127.0.0.1:6390 -pid 1234 -restart 'redis-server ... &' \
//	    allow=http://127.0.0.1:8080/allow deny=http://127.0.0.1:8080/deny fallback=http://127.0.0.1:8080/fallback
//
// Each endpoint's name is its policy: allow (on_store_error allow), deny
// (deny) or fallback (fallback local, with instances 2). Every limit is 1
// per hour (fallback: 2 per hour, so that its local share, 1, tells a local
// answer from Redis's by X-RateLimit-Limit), so that Redis answers 429
// with the rate-limit headers from the first requests on; an answer
// without X-RateLimit-Limit comes from the failure policy.
// Checks, per endpoint: no request fails and none gets a 5xx; while Redis
// works (SCRIPT FLUSH and CLIENT KILL included) every answer comes from
// Redis, but for at most -dropped (default 0) decided by the failure policy
// because CLIENT KILL dropped the connection they were written to; while
// it is hung or gone, allow answers 200 and deny 429 with Retry-After from
// the policy, fallback decides locally, and the slowest answer takes at
// most -bound (the circuit breaker's probe, one request a second, waits
// the store's timeout; the others are answered at once);
// after the restart Redis decides again within -recover; and once Redis
// answers PING again, within -holds every answer comes from Redis, which
// admits at most its quota (it restarted empty), while before that allow
// admits all, deny none, and fallback at most its local share (see
// checkReturn). It prints one line per endpoint and phase and PASS/FAIL
// lines.
//
// An endpoint named inflight is a limit of requests in flight instead
// (max_in_flight -max-in-flight, fallback local with instances 1, in front
// of e2e/backend, whose ?sleep= holds each admitted request): the same
// load, more requests at once than the limit, keeps its slots taken
// across the outage. Checks: no request fails and none gets a 5xx, every
// answer is a 200 or a 429 with Retry-After, requests are admitted in
// every phase and after the restart, and the upstream, whose counts
// -counts reads (e2e/backend's /_counts for the endpoint's path), never had
// more than -max-in-flight of them in progress at once, and had that many.
//
// With -sentinel, it runs a failover instead: the same load for 6 s, and
// at 2 s SENTINEL FAILOVER of -master asked of that Sentinel (the
// endpoints' store follows the master the Sentinels name):
//
//	outage -sentinel 127.0.0.1:26379 -master mymaster allow=http://127.0.0.1:8080/failover
//
// Checks: the new master runs the endpoints' scripts within -switch of the
// failover (the recovery, printed in seconds; before, the old master or
// the failure policy answers); and per endpoint: no request fails and none
// gets a 5xx; every answer before the failover comes from Redis; after it,
// the failure policy answers for at most -switch, and Redis, holding the
// counters it replicated, admits at most its quota more.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// answer is one request's outcome.
type answer struct {
	at, took time.Duration // since the start; its latency
	code     int           // 0: the request failed
	redis    bool          // it carries X-RateLimit-Limit: a limit decided it
	limit    string        // its X-RateLimit-Limit: the quota of the limit that decided it
	retry    bool          // it carries Retry-After
}

// loadFor is how long the load of the outage schedule lasts.
const loadFor = 11 * time.Second

// phase is a span of the schedule.
type phase struct {
	name     string
	from, to time.Duration
	working  bool // Redis answers
}

// phases of the schedule, by start.
var phases = []phase{
	{"working, then SCRIPT FLUSH and CLIENT KILL", 0, 3 * time.Second, true},
	{"hung (SIGSTOP)", 3*time.Second + 300*time.Millisecond, 5 * time.Second, false},
	// Until the store's timeout before the restart: a request started
	// later may be decided by the restarted Redis.
	{"gone (SIGKILL)", 6*time.Second + 300*time.Millisecond, 8*time.Second - 100*time.Millisecond, false},
}

func main() {
	redis := flag.String("redis", "", "host:port of the redis-server")
	pid := flag.Int("pid", 0, "its process id")
	restart := flag.String("restart", "", "a shell command that starts it again, in the background")
	rate := flag.Int("rate", 50, "requests per second to each endpoint")
	bound := flag.Duration("bound", 300*time.Millisecond, "the slowest answer allowed while Redis is hung or gone")
	recov := flag.Duration("recover", 2*time.Second, "the longest until Redis decides again after the restart")
	dropped := flag.Int("dropped", 0, "how many answers per endpoint may come from the failure policy while Redis works: decisions written to a connection CLIENT KILL dropped, which a client that cannot prove them unrun must not send again")
	// A probe that failed as Redis came back (at most a timeout, 100 ms,
	// after it) opens the breaker for another backoff (1 s); the next
	// probe then takes its round trips (a new connection, SCRIPT LOAD after
	// NOSCRIPT), at most a timeout, during which the policy still answers.
	holds := flag.Duration("holds", 1200*time.Millisecond, "the longest, once Redis answers PING again, until the limit in Redis decides every request: the breaker's backoff and twice the store's timeout")
	instances := flag.Int("instances", 2, "the fallback endpoint's instances: its local share is its quota divided by them")
	sentinel := flag.String("sentinel", "", "host:port of a Sentinel: run a failover instead of the outage schedule")
	master := flag.String("master", "mymaster", "with -sentinel, the master set to fail over")
	switchBound := flag.Duration("switch", 4*time.Second, "with -sentinel, the longest after SENTINEL FAILOVER until the new master runs the scripts, and the failure policy may answer")
	counts := flag.String("counts", "", "for an endpoint named inflight, the backend's /_counts URL for its path")
	maxInFlight := flag.Int("max-in-flight", 4, "the inflight endpoint's max_in_flight")
	flag.Parse()
	if *sentinel != "" && flag.NArg() > 0 {
		if failover(*sentinel, *master, *rate, *switchBound, flag.Args()) {
			os.Exit(1)
		}
		return
	}
	if *redis == "" || *pid == 0 || *restart == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "outage: -redis, -pid, -restart and name=url endpoints are required")
		os.Exit(2)
	}
	host, port, _ := strings.Cut(*redis, ":")
	cli := func(args ...string) {
		if out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput(); err != nil {
			fmt.Printf("outage: redis-cli %v: %v %s\n", args, err, out)
		}
	}
	start := time.Now()
	// back is when Redis answers PING again after the restart.
	var backMu sync.Mutex
	back := time.Duration(-1)
	schedule := []struct {
		at time.Duration
		do func()
	}{
		{1 * time.Second, func() { cli("SCRIPT", "FLUSH") }},
		{2 * time.Second, func() { cli("CLIENT", "KILL", "TYPE", "normal") }},
		{3 * time.Second, func() { syscall.Kill(*pid, syscall.SIGSTOP) }},
		{5 * time.Second, func() { syscall.Kill(*pid, syscall.SIGCONT) }},
		{6 * time.Second, func() { syscall.Kill(*pid, syscall.SIGKILL) }},
		{8 * time.Second, func() {
			if err := exec.Command("sh", "-c", *restart).Run(); err != nil {
				fmt.Println("outage: restart:", err)
			}
			for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
				if out, err := exec.Command("redis-cli", "-h", host, "-p", port, "PING").Output(); err == nil && strings.TrimSpace(string(out)) == "PONG" {
					backMu.Lock()
					back = time.Since(start)
					backMu.Unlock()
					return
				}
			}
		}},
	}
	end := loadFor
	go func() {
		for _, ev := range schedule {
			time.Sleep(time.Until(start.Add(ev.at)))
			ev.do()
		}
	}()

	names := make([]string, flag.NArg())
	results := make([][]answer, flag.NArg())
	var wg sync.WaitGroup
	for i, arg := range flag.Args() {
		name, url, _ := strings.Cut(arg, "=")
		names[i] = name
		i, url := i, url
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = load(url, *rate, start, end)
		}()
	}
	wg.Wait()

	backMu.Lock()
	backAt := back
	backMu.Unlock()
	if backAt < 0 {
		fmt.Println("FAIL: outage: Redis did not answer PING within 2 s of the restart")
		os.Exit(1)
	}
	fmt.Printf("outage: Redis answers PING %v after the restart\n", (backAt - 8*time.Second).Round(time.Millisecond))
	failed := false
	for i, name := range names {
		if name == "inflight" {
			failed = checkInFlight(name, results[i], backAt, *counts, *maxInFlight) || failed
			continue
		}
		failed = check(name, results[i], *bound, *recov, *dropped) || failed
		failed = checkReturn(name, results[i], backAt, *holds, *instances) || failed
	}
	if failed {
		os.Exit(1)
	}
}

// load sends rate requests per second to url, each from its own goroutine
// (so that a slow answer does not slow the load), until end, and returns
// the answers by start time.
func load(url string, rate int, start time.Time, end time.Duration) []answer {
	client := &http.Client{Timeout: 5 * time.Second}
	var mu sync.Mutex
	var out []answer
	var wg sync.WaitGroup
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	for time.Since(start) < end {
		<-tick.C
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := answer{at: time.Since(start)}
			t0 := time.Now()
			resp, err := client.Get(url)
			a.took = time.Since(t0)
			if err == nil {
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				a.code = resp.StatusCode
				a.limit = resp.Header.Get("X-Ratelimit-Limit")
				a.redis = a.limit != ""
				a.retry = resp.Header.Get("Retry-After") != ""
			}
			mu.Lock()
			out = append(out, a)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

// check prints name's figures per phase and reports whether a check failed.
func check(name string, as []answer, bound, recov time.Duration, dropped int) bool {
	var problems []string
	for _, a := range as {
		if a.code == 0 || a.code >= 500 {
			problems = append(problems, fmt.Sprintf("at %.2f s status %d", a.at.Seconds(), a.code))
			break
		}
	}
	for _, p := range phases {
		var in []answer
		for _, a := range as {
			if a.at >= p.from && a.at < p.to {
				in = append(in, a)
			}
		}
		byRedis, policy, ok, rejected, slowest := 0, 0, 0, 0, time.Duration(0)
		var took []time.Duration
		for _, a := range in {
			took = append(took, a.took)
			if a.took > slowest {
				slowest = a.took
			}
			if a.redis {
				byRedis++
			} else {
				policy++
			}
			switch {
			case a.code == http.StatusOK:
				ok++
			case a.code == http.StatusTooManyRequests:
				rejected++
				if !a.retry {
					problems = append(problems, fmt.Sprintf("%s: a 429 without Retry-After", p.name))
				}
			}
		}
		sort.Slice(took, func(i, j int) bool { return took[i] < took[j] })
		p99 := time.Duration(0)
		if len(took) > 0 {
			p99 = took[len(took)*99/100]
		}
		fmt.Printf("outage: %-8s %-44s %3d answers: %3d × 200, %3d × 429; %3d decided by a limit, %3d by the policy; p99 %v, slowest %v\n",
			name, p.name, len(in), ok, rejected, byRedis, policy, p99.Round(time.Millisecond), slowest.Round(time.Millisecond))
		switch {
		case len(in) == 0:
			problems = append(problems, p.name+": no answer")
		case p.working && policy > dropped:
			problems = append(problems, fmt.Sprintf("%s: %d answers from the failure policy while Redis worked", p.name, policy))
		case !p.working && slowest > bound:
			problems = append(problems, fmt.Sprintf("%s: the slowest answer took %v, more than %v", p.name, slowest, bound))
		case !p.working && name == "allow" && (ok != len(in) || byRedis > 0):
			problems = append(problems, fmt.Sprintf("%s: allow answered %d × 200 of %d (%d decided by a limit)", p.name, ok, len(in), byRedis))
		case !p.working && name == "deny" && (rejected != len(in) || byRedis > 0):
			problems = append(problems, fmt.Sprintf("%s: deny answered %d × 429 of %d (%d decided by a limit)", p.name, rejected, len(in), byRedis))
		case !p.working && name == "fallback" && policy > 0:
			problems = append(problems, fmt.Sprintf("%s: fallback left %d answers to a policy", p.name, policy))
		}
	}
	// Recovery: the first answer from a limit, after the restart, by the
	// endpoints whose failure answers carry no limit.
	if name != "fallback" {
		restart := 8 * time.Second
		back := time.Duration(-1)
		for _, a := range as {
			if a.at >= restart && a.redis {
				back = a.at - restart
				break
			}
		}
		if back < 0 || back > recov {
			problems = append(problems, fmt.Sprintf("Redis did not decide again within %v of the restart (%v)", recov, back))
		} else {
			fmt.Printf("outage: %-8s Redis decides again %v after the restart\n", name, back.Round(10*time.Millisecond))
		}
	}
	if len(problems) > 0 {
		fmt.Printf("FAIL: outage %s: %s\n", name, strings.Join(problems, "; "))
		return true
	}
	fmt.Printf("PASS: outage %s: policy followed, bounded, recovered\n", name)
	return false
}

// checkReturn measures name's admissions once Redis is back (answering
// PING at back, empty after its restart) against the bound README.md and
// SECURITY.md document: within holds the limit in Redis decides every
// request again; before that, allow admits every request, deny none, and
// fallback at most its local share (the quota divided by instances, spent
// during the outage already); from then on Redis admits
// at most one full bucket (its quota here), having lost its counters. An
// answer comes from Redis when it carries the quota of the answers of the
// working phase (the local fallback's quota is a share of it: -instances
// 2 makes the two differ) and, for allow and deny, any quota at all. It
// prints the figures and reports whether a check failed.
func checkReturn(name string, as []answer, back, holds time.Duration, instances int) bool {
	full := ""
	for _, a := range as {
		if a.at < phases[0].to && a.redis {
			full = a.limit
			break
		}
	}
	quota, _ := strconv.ParseFloat(full, 64)
	fromRedis := func(a answer) bool { return a.redis && a.limit == full }
	var problems []string
	last := time.Duration(-1) // start of the last answer not from Redis, since back
	beforeOK, redisOK, redisAll := 0, 0, 0
	for _, a := range as {
		if a.at < back {
			continue
		}
		if !fromRedis(a) {
			last = a.at - back
			if a.code == http.StatusOK {
				beforeOK++
			}
			continue
		}
		redisAll++
		if a.code == http.StatusOK {
			redisOK++
		}
	}
	holdsAfter := "at once"
	if last >= 0 {
		holdsAfter = fmt.Sprintf("after %v", last.Round(time.Millisecond))
	}
	fmt.Printf("outage: %-8s after Redis is back: the limit in Redis decides every request %s (bound %v); before that %d admitted by the %s; then Redis admitted %d of %d (bound: its quota, %s)\n",
		name, holdsAfter, holds, beforeOK, map[bool]string{true: "local fallback", false: "policy"}[name == "fallback"], redisOK, redisAll, full)
	switch {
	case full == "" || quota <= 0:
		problems = append(problems, "no answer from Redis while it worked")
	case last > holds:
		problems = append(problems, fmt.Sprintf("an answer not from Redis %v after Redis was back, more than %v", last, holds))
	case redisAll == 0:
		problems = append(problems, "no answer from Redis after it was back")
	case float64(redisOK) > quota:
		problems = append(problems, fmt.Sprintf("Redis admitted %d after it was back, more than its quota %v", redisOK, quota))
	case name == "deny" && beforeOK > 0:
		problems = append(problems, fmt.Sprintf("deny admitted %d before Redis decided again", beforeOK))
	case name == "fallback" && float64(beforeOK) > quota/float64(instances):
		problems = append(problems, fmt.Sprintf("the local fallback admitted %d after Redis was back, more than its share %v", beforeOK, quota/float64(instances)))
	}
	if len(problems) > 0 {
		fmt.Printf("FAIL: outage %s after Redis returns: %s\n", name, strings.Join(problems, "; "))
		return true
	}
	fmt.Printf("PASS: outage %s after Redis returns: bounded\n", name)
	return false
}

// checkInFlight checks the answers of name, an endpoint limited to max
// requests in flight with fallback local and one instance, and the peak the
// upstream saw (read from counts), prints the figures and reports whether a
// check failed.
func checkInFlight(name string, as []answer, back time.Duration, counts string, max int) bool {
	var problems []string
	for _, a := range as {
		if a.code == 0 || a.code >= 500 {
			problems = append(problems, fmt.Sprintf("at %.2f s status %d", a.at.Seconds(), a.code))
			break
		}
	}
	spans := append(append([]phase(nil), phases...), phase{"back (Redis answers PING again)", back, loadFor, true})
	for _, p := range spans {
		ok, rejected := 0, 0
		for _, a := range as {
			if a.at < p.from || a.at >= p.to {
				continue
			}
			switch a.code {
			case http.StatusOK:
				ok++
			case http.StatusTooManyRequests:
				rejected++
				if !a.retry {
					problems = append(problems, fmt.Sprintf("%s: a 429 without Retry-After", p.name))
				}
			}
		}
		fmt.Printf("outage: %-8s %-44s %3d × 200, %3d × 429\n", name, p.name, ok, rejected)
		if ok == 0 {
			problems = append(problems, p.name+": no request admitted")
		}
	}
	peak, err := upstreamPeak(counts)
	switch {
	case err != nil:
		problems = append(problems, fmt.Sprintf("reading the upstream's counts: %v", err))
	case peak > max:
		problems = append(problems, fmt.Sprintf("the upstream had %d requests in progress at once, more than max_in_flight %d", peak, max))
	case peak < max:
		problems = append(problems, fmt.Sprintf("the upstream had at most %d requests in progress at once: the load did not take the %d slots", peak, max))
	}
	if err == nil {
		fmt.Printf("outage: %-8s the upstream had at most %d requests in progress at once (max_in_flight %d)\n", name, peak, max)
	}
	if len(problems) > 0 {
		fmt.Printf("FAIL: outage %s: %s\n", name, strings.Join(problems, "; "))
		return true
	}
	fmt.Printf("PASS: outage %s: no failed request, admissions in every phase, never more than %d in flight through the outage and the restart\n", name, max)
	return false
}

// upstreamPeak reads the most requests in progress at once that
// e2e/backend's /_counts at url reports.
func upstreamPeak(url string) (int, error) {
	if url == "" {
		return 0, fmt.Errorf("no -counts")
	}
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var c struct {
		Peak *int `json:"peak"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK || c.Peak == nil {
		return 0, fmt.Errorf("status %d, peak %v", resp.StatusCode, c.Peak)
	}
	return *c.Peak, nil
}

// failover loads the endpoints args (name=url) for 6 s while, at 2 s, the
// Sentinel at sentinel fails master over, and checks each endpoint's
// answers against bound (see the package documentation). It reports
// whether a check failed.
func failover(sentinel, master string, rate int, bound time.Duration, args []string) bool {
	host, port, _ := strings.Cut(sentinel, ":")
	cli := func(a ...string) (string, error) {
		out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, a...)...).Output()
		return strings.TrimSpace(string(out)), err
	}
	before, _ := cli("SENTINEL", "get-master-addr-by-name", master)
	start := time.Now()
	const at, end = 2 * time.Second, 6 * time.Second
	var mu sync.Mutex
	asked, named, moved := time.Duration(-1), time.Duration(-1), time.Duration(-1)
	go func() {
		time.Sleep(time.Until(start.Add(at)))
		if out, err := cli("SENTINEL", "FAILOVER", master); err != nil || out != "OK" {
			fmt.Printf("outage: SENTINEL FAILOVER %s: %q %v\n", master, out, err)
			return
		}
		mu.Lock()
		asked = time.Since(start)
		mu.Unlock()
		var addr []string
		for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline) && addr == nil; time.Sleep(10 * time.Millisecond) {
			if now, _ := cli("SENTINEL", "get-master-addr-by-name", master); now != before && now != "" {
				mu.Lock()
				named = time.Since(start)
				mu.Unlock()
				addr = strings.Fields(now)
			}
		}
		if len(addr) != 2 {
			return
		}
		// The hosts have moved when the new master runs their scripts
		// itself: as a replica it only applied their effects.
		for time.Since(start) < end {
			out, _ := exec.Command("redis-cli", "-h", addr[0], "-p", addr[1], "INFO", "commandstats").Output()
			if strings.Contains(string(out), "cmdstat_evalsha:calls=") {
				mu.Lock()
				moved = time.Since(start)
				mu.Unlock()
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	results := make([][]answer, len(args))
	var wg sync.WaitGroup
	for i, arg := range args {
		_, url, _ := strings.Cut(arg, "=")
		i, url := i, url
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = load(url, rate, start, end)
		}()
	}
	wg.Wait()
	mu.Lock()
	askedAt, namedAt, movedAt := asked, named, moved
	mu.Unlock()
	if askedAt < 0 || namedAt < 0 {
		fmt.Printf("FAIL: outage failover: SENTINEL FAILOVER not done (asked at %v, new master named at %v)\n", askedAt, namedAt)
		return true
	}
	if movedAt < 0 || movedAt-askedAt > bound {
		fmt.Printf("FAIL: outage failover: the new master ran no script within %v of SENTINEL FAILOVER (the Sentinel named it after %v)\n", bound, (namedAt - askedAt).Round(time.Millisecond))
		return true
	}
	fmt.Printf("outage: failover: the Sentinel names the new master %v after SENTINEL FAILOVER; the host's scripts run on it %.2f s after (the recovery; bound %v)\n",
		(namedAt - askedAt).Round(time.Millisecond), (movedAt - askedAt).Seconds(), bound)
	failed := false
	for i, arg := range args {
		name, _, _ := strings.Cut(arg, "=")
		if checkFailover(name, results[i], askedAt, bound) {
			failed = true
		}
	}
	return failed
}

// checkFailover checks name's answers around a failover asked at asked,
// prints its figures, and reports whether a check failed.
func checkFailover(name string, as []answer, asked, bound time.Duration) bool {
	var problems []string
	for _, a := range as {
		if a.code == 0 || a.code >= 500 {
			problems = append(problems, fmt.Sprintf("at %.2f s status %d", a.at.Seconds(), a.code))
			break
		}
	}
	quota := 0.0
	recovery, policy, admitted, decided := time.Duration(0), 0, 0, 0
	for _, a := range as {
		switch {
		case a.at < asked && !a.redis:
			problems = append(problems, fmt.Sprintf("at %.2f s, before the failover, an answer from the failure policy", a.at.Seconds()))
		case a.at < asked:
			quota, _ = strconv.ParseFloat(a.limit, 64)
		case !a.redis:
			policy++
			recovery = a.at - asked
		default:
			decided++
			if a.code == http.StatusOK {
				admitted++
			}
		}
	}
	fmt.Printf("outage: %-8s failover: %d answers from the policy, the last %.2f s after SENTINEL FAILOVER (bound %v); after it Redis decided %d, admitted %d (bound: its quota, %v)\n",
		name, policy, recovery.Seconds(), bound, decided, admitted, quota)
	switch {
	case quota == 0:
		problems = append(problems, "no answer from Redis before the failover")
	case recovery > bound:
		problems = append(problems, fmt.Sprintf("the policy answered %v after the failover, more than %v", recovery, bound))
	case decided == 0:
		problems = append(problems, "no answer from the new master")
	case float64(admitted) > quota:
		problems = append(problems, fmt.Sprintf("the new master admitted %d, more than the quota %v", admitted, quota))
	}
	if len(problems) > 0 {
		fmt.Printf("FAIL: outage %s failover: %s\n", name, strings.Join(problems, "; "))
		return true
	}
	fmt.Printf("PASS: outage %s failover: no failed request, %d answers from the policy, no admission beyond the quota\n", name, policy)
	return false
}
