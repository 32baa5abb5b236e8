package traefikplugin

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/telemetry"
	"github.com/sluicehq/sluice/internal/redistest"
)

// metricsRegistry is a test registry whose metrics listeners are closed
// when the test ends.
func metricsRegistry(t *testing.T) *testRegistry {
	g := newTestRegistry()
	t.Cleanup(func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		for _, s := range g.servers {
			s.close()
		}
	})
	return g
}

// withMetrics is cfg with metrics served at address.
func withMetrics(cfg Config, address string, networks ...string) *Config {
	cfg.Metrics = &Metrics{Address: address, AllowedNetworks: networks}
	return &cfg
}

// scrape reads GET /metrics from the listener g started for address, as
// a client on the loopback, and checks its status and content type.
func scrape(t *testing.T, g *testRegistry, address string) string {
	t.Helper()
	resp, body := get(t, g, address, "/metrics")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != telemetry.ContentType {
		t.Fatalf("GET /metrics: %d, Content-Type %q:\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
	return body
}

// hasLines fails t unless every line of want is a line of got.
func hasLines(t *testing.T, got string, want ...string) {
	t.Helper()
	lines := map[string]bool{}
	for _, l := range strings.Split(got, "\n") {
		lines[l] = true
	}
	for _, w := range want {
		if !lines[w] {
			t.Errorf("no line %q in\n%s", w, got)
		}
	}
}

const anyPort = "127.0.0.1:0"

// TestMetricsScrape: a scrape of the listener counts the requests served
// through the handler by outcome, near misses among the allowed, and
// every decision in the histogram; a middleware with limits[] reports
// each limit as a zone of its own, named as in RateLimit-Policy.
func TestMetricsScrape(t *testing.T) {
	g := metricsRegistry(t)
	h, _ := g.mustNew(t, withMetrics(Config{Average: "3", Period: "1h", Burst: "3"}, anyPort), "api@file")
	if got := codes(h, request{}, 5); got != "200 200 200 429 429" {
		t.Fatalf("codes %s", got)
	}
	multi, _ := g.mustNew(t, withMetrics(Config{Average: "100", Burst: "100", Limits: []LimitConfig{
		{Name: "per-key", Average: "1", Period: "1h", Key: []string{"header:X-Key"}},
	}}, anyPort), "multi@file")
	if got := codes(multi, request{headers: map[string]string{"X-Key": "k"}}, 2); got != "200 429" {
		t.Fatalf("multi codes %s", got)
	}
	codes(multi, request{}, 1) // per-key skipped: the top-level limit decides
	body := scrape(t, g, anyPort)
	hasLines(t, body,
		"# TYPE sluice_decisions_total counter",
		`sluice_decisions_total{zone="api@file",outcome="allowed"} 3`,
		`sluice_decisions_total{zone="api@file",outcome="rejected"} 2`,
		`sluice_decisions_total{zone="api@file",outcome="near_limit"} 1`,
		`sluice_decisions_total{zone="api@file",outcome="dry_run_rejected"} 0`,
		`sluice_decisions_total{zone="multi@file/per-key",outcome="allowed"} 1`,
		`sluice_decisions_total{zone="multi@file/per-key",outcome="near_limit"} 1`,
		`sluice_decisions_total{zone="multi@file/per-key",outcome="rejected"} 1`,
		`sluice_decisions_total{zone="multi@file/default",outcome="allowed"} 1`,
		"# TYPE sluice_decision_seconds histogram",
		`sluice_decision_seconds_bucket{middleware="api@file",le="+Inf"} 5`,
		`sluice_decision_seconds_count{middleware="api@file"} 5`,
		`sluice_decision_seconds_count{middleware="multi@file"} 3`,
	)
	if strings.Contains(body, `zone="multi@file"`) {
		t.Errorf("a middleware with several limits reported as one zone:\n%s", body)
	}
}

// TestMetricsNotOnEntryPoint: the middleware itself serves no metrics: a
// request for /metrics through it is decided and passed on like any other.
func TestMetricsNotOnEntryPoint(t *testing.T) {
	g := metricsRegistry(t)
	h, next := g.mustNew(t, withMetrics(Config{Average: "10"}, anyPort), "api@file")
	r := httptest.NewRequest(http.MethodGet, "http://example.com/metrics", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if next.count() != 1 || strings.Contains(w.Body.String(), "sluice_") {
		t.Fatalf("GET /metrics through the middleware: next called %d times, body %q", next.count(), w.Body)
	}
}

// TestMetricsOneListener: one listener per address for the process,
// whatever the number of middlewares, routers (New calls) and reloads
// naming it; a configuration replaced by a reload is no longer exported;
// the listener closes when the last entry naming its address leaves the
// registry.
func TestMetricsOneListener(t *testing.T) {
	g := metricsRegistry(t)
	g.maxVersions = 2
	for i := 0; i < 10; i++ { // routers, and reloads with the same configuration
		g.mustNew(t, withMetrics(Config{Average: "10"}, anyPort), "api@file")
		g.mustNew(t, withMetrics(Config{Average: "20"}, anyPort), "web@file")
	}
	g.mu.Lock()
	first, n := g.servers[anyPort], len(g.servers)
	g.mu.Unlock()
	if n != 1 || first == nil || first.refs != 2 {
		t.Fatalf("%d listeners, want 1 held by 2 entries", n)
	}
	// A reload changes api's configuration: its zones are now those of
	// the new one, on the same listener.
	reloaded, _ := g.mustNew(t, withMetrics(Config{Average: "10", Limits: []LimitConfig{{Name: "b", Average: "5"}}}, anyPort), "api@file")
	codes(reloaded, request{}, 1)
	body := scrape(t, g, anyPort)
	hasLines(t, body, `sluice_decisions_total{zone="api@file/default",outcome="allowed"} 1`, `sluice_decisions_total{zone="web@file",outcome="allowed"} 0`)
	if strings.Contains(body, `zone="api@file"`) {
		t.Errorf("the replaced configuration is still exported:\n%s", body)
	}
	g.mu.Lock()
	same := g.servers[anyPort] == first && len(g.servers) == 1
	g.mu.Unlock()
	if !same {
		t.Fatal("a reload started another listener")
	}
	// A version without metrics: api is no longer exported; then enough
	// versions of both names to drop every entry naming the address.
	g.mustNew(t, &Config{Average: "11"}, "api@file")
	if body := scrape(t, g, anyPort); strings.Contains(body, `zone="api@file`) {
		t.Errorf("api's newest version has no metrics, but it is exported:\n%s", body)
	}
	for _, avg := range []string{"12", "13"} {
		g.mustNew(t, &Config{Average: avg}, "api@file")
		g.mustNew(t, &Config{Average: avg}, "web@file")
	}
	g.mu.Lock()
	n = len(g.servers)
	g.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d listeners left with no entry naming an address", n)
	}
	if c, err := net.Dial("tcp", first.addr.String()); err == nil {
		c.Close()
		t.Fatal("the closed listener still accepts connections")
	}
}

// TestMetricsAddresses: middlewares naming different addresses get a
// listener each, and each listener exports only its own middlewares.
func TestMetricsAddresses(t *testing.T) {
	g := metricsRegistry(t)
	g.mustNew(t, withMetrics(Config{Average: "1"}, anyPort), "api@file")
	g.mustNew(t, withMetrics(Config{Average: "1"}, "[::1]:0"), "web@file")
	if strings.Contains(scrape(t, g, anyPort), "web@file") {
		t.Error("a middleware is exported at an address it does not name")
	}
}

// TestMetricsAllowedNetworks: a scrape sees the middlewares whose
// allowedNetworks hold its peer address (loopback by default), and is
// refused with 403 when none does.
func TestMetricsAllowedNetworks(t *testing.T) {
	g := metricsRegistry(t)
	g.mustNew(t, withMetrics(Config{Average: "1"}, anyPort), "local@file")
	g.mustNew(t, withMetrics(Config{Average: "1"}, anyPort, "192.0.2.0/24"), "lan@file")
	for _, tc := range []struct {
		remote     string
		code       int
		see, blind string
	}{
		{"127.0.0.1:5000", http.StatusOK, "local@file", "lan@file"},
		{"[::1]:5000", http.StatusOK, "local@file", "lan@file"},
		{"192.0.2.7:5000", http.StatusOK, "lan@file", "local@file"},
		{"198.51.100.1:5000", http.StatusForbidden, "", "@file"},
		{"127.0.0.1:5000", http.StatusMethodNotAllowed, "", "@file"},
	} {
		method := http.MethodGet
		if tc.code == http.StatusMethodNotAllowed {
			method = http.MethodPost
		}
		r := httptest.NewRequest(method, "/metrics", nil)
		r.RemoteAddr = tc.remote
		w := httptest.NewRecorder()
		g.restricted(anyPort, writeMetrics, http.MethodGet, http.MethodHead)(w, r)
		body := w.Body.String()
		if w.Code != tc.code || !strings.Contains(body, tc.see) || strings.Contains(body, tc.blind) {
			t.Errorf("scrape from %s: %d\n%s\nwant %d, seeing %q and not %q", tc.remote, w.Code, body, tc.code, tc.see, tc.blind)
		}
	}
}

// TestMetricsRedis: on Redis, decisions are counted as in memory, a store
// failure by its outcome, and each store's breaker is exported by its
// address.
func TestMetricsRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	g := metricsRegistry(t)
	h, _ := g.mustNew(t, withMetrics(*redisConfig(srv.Addr, "3"), anyPort), "api@file")
	if got := codes(h, request{}, 4); got != "200 200 200 429" {
		t.Fatalf("codes %s", got)
	}
	down := closedPort(t)
	failing, _ := g.mustNew(t, withMetrics(Config{Average: "100", Redis: &Redis{Endpoints: []string{down}, DialTimeout: "100ms"}}, anyPort), "down@file")
	if got := codes(failing, request{}, 2); got != "200 200" {
		t.Fatalf("Redis down: codes %s", got)
	}
	hasLines(t, scrape(t, g, anyPort),
		`sluice_decisions_total{zone="api@file",outcome="allowed"} 3`,
		`sluice_decisions_total{zone="api@file",outcome="rejected"} 1`,
		`sluice_decisions_total{zone="api@file",outcome="near_limit"} 1`,
		`sluice_decisions_total{zone="down@file",outcome="store_error_allowed"} 2`,
		`sluice_store_breaker_state{store="`+srv.Addr+`"} 0`,
		`sluice_decision_seconds_count{middleware="api@file"} 4`,
		`sluice_decision_seconds_count{middleware="down@file"} 2`,
	)
}

// get reads path from the listener g started for address, as a client on
// the loopback, returning the response and its body.
func get(t *testing.T, g *testRegistry, address, path string) (*http.Response, string) {
	t.Helper()
	return call(t, g, address, http.MethodGet, path)
}

// call is get with another method.
func call(t *testing.T, g *testRegistry, address, method, path string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+listening(t, g, address)+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, string(body)
}

// listening returns where the listener g started for address listens,
// failing t if it does not.
func listening(t *testing.T, g *testRegistry, address string) string {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.servers[address]
	if s == nil || s.addr == nil {
		t.Fatalf("no listener for %s", address)
	}
	return s.addr.String()
}

// TestMetricsAdvice: a middleware with metrics records each limit's
// demand, admitted or refused, per key and period; once a period is over
// the listener's /sluice/zones/<zone>/advice answers with it, as the
// Caddy module's admin API does, and /metrics exports it.
func TestMetricsAdvice(t *testing.T) {
	g := metricsRegistry(t)
	h, _ := g.mustNew(t, withMetrics(Config{Average: "2", Period: "1m", Burst: "2", Limits: []LimitConfig{
		{Name: "per-key", Average: "1", Period: "1m", Key: []string{"header:X-Key"}},
	}}, anyPort), "api@file")
	if got := codes(h, request{headers: map[string]string{"X-Key": "a"}}, 3); got != "200 429 429" {
		t.Fatalf("codes %s", got)
	}
	if got := codes(h, request{headers: map[string]string{"X-Key": "b"}}, 1); got != "200" {
		t.Fatalf("codes %s", got)
	}
	g.clock.advance(time.Minute)
	resp, body := get(t, g, anyPort, "/sluice/zones/"+url.PathEscape("api@file/per-key")+"/advice?candidate=3/1m")
	var adv demand.Advice
	if err := json.Unmarshal([]byte(body), &adv); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("advice: %d %s (%v)", resp.StatusCode, body, err)
	}
	if adv.Zone != "api@file/per-key" || adv.Keys != 2 || adv.KeyPeriods != 2 || adv.Cost != 4 || adv.Demand.Max != 3 {
		t.Fatalf("advice %s; want 2 keys, 2 key-periods asking 4 (the refused requests too), max 3", body)
	}
	last := adv.Candidates[len(adv.Candidates)-1]
	if last.Name != "asked" || last.Rate != "3/1m" || last.KeyPeriods.Value != 0 {
		t.Errorf("the candidate asked: %+v, want 3/1m refusing nothing", last)
	}
	// The top-level limit (the default zone) saw b's request and a's three.
	if resp, body = get(t, g, anyPort, "/sluice/zones/"+url.PathEscape("api@file/default")+"/advice"); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"key_periods":1,`) {
		t.Errorf("the default limit's advice: %d %s, want its one key-period", resp.StatusCode, body)
	}
	hasLines(t, scrape(t, g, anyPort),
		`sluice_demand_key_periods_total{zone="api@file/per-key"} 2`,
		`sluice_demand{zone="api@file/per-key",quantile="1"} 3`,
	)
	for path, want := range map[string]int{
		"/sluice/zones/nothing/advice":                                                   http.StatusNotFound,
		"/sluice/zones/api@file/per-key/advice":                                          http.StatusNotFound, // the zone's slash unescaped
		"/sluice/zones/" + url.PathEscape("api@file/per-key") + "/top":                   http.StatusNotFound,
		"/sluice/zones/" + url.PathEscape("api@file/per-key") + "/advice?candidate=fast": http.StatusBadRequest,
	} {
		if resp, body := get(t, g, anyPort, path); resp.StatusCode != want {
			t.Errorf("GET %s: %d %s, want %d", path, resp.StatusCode, body, want)
		}
	}
	// DELETE resets the zone's demand, as Caddy's admin API does; the
	// metrics themselves cannot be deleted.
	zone := "/sluice/zones/" + url.PathEscape("api@file/per-key") + "/advice"
	if resp, body := call(t, g, anyPort, http.MethodDelete, zone); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE %s: %d %s, want 204", zone, resp.StatusCode, body)
	}
	if resp, body = get(t, g, anyPort, zone); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"keys":0,"key_periods":0,`) {
		t.Errorf("advice after DELETE: %d %s, want no key", resp.StatusCode, body)
	}
	if resp, body = get(t, g, anyPort, "/sluice/zones/"+url.PathEscape("api@file/default")+"/advice"); !strings.Contains(body, `"key_periods":1,`) {
		t.Errorf("the default limit's advice after the reset of per-key: %d %s, want its key-period kept", resp.StatusCode, body)
	}
	if resp, _ := call(t, g, anyPort, http.MethodDelete, "/metrics"); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("DELETE /metrics: %d, Allow %q; want 405, GET, HEAD", resp.StatusCode, resp.Header.Get("Allow"))
	}
	if resp, _ := call(t, g, anyPort, http.MethodPost, zone); resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD, DELETE" {
		t.Errorf("POST %s: %d, Allow %q; want 405, GET, HEAD, DELETE", zone, resp.StatusCode, resp.Header.Get("Allow"))
	}
	if resp, body := call(t, g, anyPort, http.MethodDelete, "/sluice/zones/nothing/advice"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("DELETE of an unknown zone's advice: %d %s, want 404", resp.StatusCode, body)
	}
}

// TestMetricsNearLimit: metrics.nearLimit sets the share of the capacity
// under which an admission counts as a near miss.
func TestMetricsNearLimit(t *testing.T) {
	g := metricsRegistry(t)
	cfg := withMetrics(Config{Average: "4", Period: "1h", Burst: "4"}, anyPort)
	cfg.Metrics.NearLimit = "50%"
	h, _ := g.mustNew(t, cfg, "api@file")
	codes(h, request{}, 4) // leaves 3, 2, 1 and 0 of 4: the last two under 2
	hasLines(t, scrape(t, g, anyPort),
		`sluice_decisions_total{zone="api@file",outcome="allowed"} 4`,
		`sluice_decisions_total{zone="api@file",outcome="near_limit"} 2`,
	)
}

// TestMetricsAdviceReloads: the advice and the demand metrics read the
// recorder of the middleware's newest configuration: after a reload to
// another period and back, the first configuration's (which its handler
// records into); after a reload with demandKeys off, none.
func TestMetricsAdviceReloads(t *testing.T) {
	g := metricsRegistry(t)
	a := withMetrics(Config{Average: "5", Period: "1m", Burst: "5"}, anyPort)
	b := withMetrics(Config{Average: "5", Period: "2m", Burst: "5"}, anyPort)
	g.mustNew(t, a, "api@file")
	g.mustNew(t, b, "api@file")
	h, _ := g.mustNew(t, a, "api@file") // back to a: its entry, its recorder
	codes(h, request{}, 3)
	g.clock.advance(time.Minute)
	resp, body := get(t, g, anyPort, "/sluice/zones/api@file/advice")
	if resp.StatusCode != http.StatusOK || !strings.Contains(body, `"period":"1m","since"`) || !strings.Contains(body, `"key_periods":1,`) {
		t.Fatalf("advice after a → b → a: %d %s; want a's 1m recorder with its key-period", resp.StatusCode, body)
	}
	off := withMetrics(Config{Average: "5", Period: "1m", Burst: "5"}, anyPort)
	off.Metrics.DemandKeys = "off"
	g.mustNew(t, off, "api@file")
	if resp, body = get(t, g, anyPort, "/sluice/zones/api@file/advice"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("advice after a reload with demandKeys off: %d %s, want 404", resp.StatusCode, body)
	}
	if m := scrape(t, g, anyPort); strings.Contains(m, "sluice_demand") {
		t.Errorf("demand exported after a reload with demandKeys off:\n%s", m)
	}
}

// TestMetricsAdviceFleet: two Traefiks (two registries) recording a
// middleware's demand with demandScope fleet in one Redis each see part
// of a client's asks; the advice of either holds the client's whole
// key-period, and a DELETE in one resets it for both. A fleet's demand is
// not exported in one instance's metrics.
func TestMetricsAdviceFleet(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	cfg := func() *Config {
		c := redisConfig(srv.Addr, "100")
		c.Average, c.Period = "100", "1m"
		c = withMetrics(*c, anyPort)
		c.Metrics.DemandScope = "fleet"
		return c
	}
	ga, gb := metricsRegistry(t), metricsRegistry(t)
	ha, _ := ga.mustNew(t, cfg(), "api@file")
	hb, _ := gb.mustNew(t, cfg(), "api@file")
	codes(ha, request{}, 3)
	codes(hb, request{}, 2)
	codes(hb, request{remote: "192.0.2.9:1234"}, 1)
	for _, g := range []*testRegistry{ga, gb} {
		g.clock.advance(2 * time.Minute) // the minute over, and sent by both
	}
	for _, g := range []*testRegistry{gb, ga} { // b's advice sends b's partials
		resp, body := get(t, g, anyPort, "/sluice/zones/api@file/advice")
		var adv demand.Advice
		if err := json.Unmarshal([]byte(body), &adv); resp.StatusCode != http.StatusOK || err != nil {
			t.Fatalf("advice: %d %s (%v)", resp.StatusCode, body, err)
		}
		if g == ga && (adv.Scope != "fleet" || adv.Keys != 2 || adv.KeyPeriods != 2 || adv.Cost != 6 || adv.Demand.Max != 5) {
			t.Errorf("fleet advice %s; want scope fleet, 2 keys, 2 key-periods asking 6, the largest 5 (3 in one instance, 2 in the other)", body)
		}
	}
	if m := scrape(t, ga, anyPort); strings.Contains(m, "sluice_demand") {
		t.Errorf("a fleet's demand in one instance's metrics:\n%s", m)
	}
	if resp, body := call(t, ga, anyPort, http.MethodDelete, "/sluice/zones/api@file/advice"); resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s, want 204", resp.StatusCode, body)
	}
	if resp, body := get(t, gb, anyPort, "/sluice/zones/api@file/advice"); resp.StatusCode != http.StatusOK || !strings.Contains(body, `"key_periods":0,`) {
		t.Errorf("the other instance's advice after the reset: %d %s, want no key-period", resp.StatusCode, body)
	}
}

// shortTimeouts bound a test listener's connections and retries in
// fractions of a second.
var shortTimeouts = serverTimeouts{read: 200 * time.Millisecond, write: 200 * time.Millisecond, idle: 200 * time.Millisecond,
	retryMin: 10 * time.Millisecond, retryMax: 40 * time.Millisecond}

// closedWithin fails t unless the server closes c within d: a read that
// ends in EOF or a reset, not in the deadline.
func closedWithin(t *testing.T, c net.Conn, d time.Duration, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	buf := make([]byte, 512)
	for {
		_, err := c.Read(buf)
		if err == nil {
			continue // the rest of an answer
		}
		if ne, ok := err.(net.Error); ok && ne.Timeout() {
			t.Errorf("%s: the connection is still open after %s", what, d)
		}
		return
	}
}

// TestMetricsConnectionsClosed: the listener closes a connection idle
// after an answer, one whose request's headers never end and one whose
// request's body never comes, each within its bound (shortened here);
// and a client that no middleware allows is answered 403 with its
// connection closed at once, whatever the bounds. Its default bounds are
// tens of seconds.
func TestMetricsConnectionsClosed(t *testing.T) {
	g := metricsRegistry(t)
	g.timeouts = shortTimeouts
	g.mustNew(t, withMetrics(Config{Average: "1"}, anyPort), "api@file")
	addr := listening(t, g, anyPort)
	for what, send := range map[string]string{
		"idle after an answer": "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
		"headers never ended":  "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Slow: 1",
		"body never sent":      "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n",
	} {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(c, send); err != nil {
			t.Fatal(err)
		}
		closedWithin(t, c, 5*time.Second, what)
		c.Close()
	}

	// Refused: a middleware read only from 192.0.2.0/24, default bounds.
	g = metricsRegistry(t)
	g.mustNew(t, withMetrics(Config{Average: "1"}, anyPort, "192.0.2.0/24"), "lan@file")
	c, err := net.Dial("tcp", listening(t, g, anyPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a refused client: %v %v, want 403", resp, err)
	}
	closedWithin(t, c, 5*time.Second, "a refused client")
	g.mu.Lock()
	srv := g.servers[anyPort].srv
	g.mu.Unlock()
	for name, d := range map[string]time.Duration{"ReadHeaderTimeout": srv.ReadHeaderTimeout, "ReadTimeout": srv.ReadTimeout,
		"WriteTimeout": srv.WriteTimeout, "IdleTimeout": srv.IdleTimeout} {
		if d <= 0 || d > time.Minute {
			t.Errorf("%s %s, want tens of seconds at most", name, d)
		}
	}
}

// decisionCount is the sum of the sluice_decision_seconds_count samples of
// a scrape: the decisions timed in what it shows.
func decisionCount(t *testing.T, body string) int {
	t.Helper()
	n := 0
	for _, l := range strings.Split(body, "\n") {
		if strings.HasPrefix(l, "sluice_decision_seconds_count") {
			v, err := strconv.Atoi(l[strings.LastIndexByte(l, ' ')+1:])
			if err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			n += v
		}
	}
	return n
}

// TestMetricsHistogramByMiddleware: the decision-time histogram of a
// listener's middlewares reaches only the clients that may read the
// middleware: a scrape counts the decisions of the middlewares it sees,
// none of another's, each middleware in a series of its own.
func TestMetricsHistogramByMiddleware(t *testing.T) {
	g := metricsRegistry(t)
	local, _ := g.mustNew(t, withMetrics(Config{Average: "100"}, anyPort), "local@file")
	lan, _ := g.mustNew(t, withMetrics(Config{Average: "100"}, anyPort, "192.0.2.0/24"), "lan@file")
	codes(local, request{}, 2)
	codes(lan, request{}, 3)
	body := scrape(t, g, anyPort) // from the loopback: local@file's
	if n := decisionCount(t, body); n != 2 || strings.Contains(body, "lan@file") {
		t.Errorf("the loopback's scrape times %d decisions, want local@file's 2 and nothing of lan@file:\n%s", n, body)
	}
	hasLines(t, body, `sluice_decision_seconds_count{middleware="local@file"} 2`)
	r := httptest.NewRequest(http.MethodGet, "/metrics", nil)
	r.RemoteAddr = "192.0.2.7:5000"
	w := httptest.NewRecorder()
	g.restricted(anyPort, writeMetrics, http.MethodGet)(w, r)
	if body = w.Body.String(); decisionCount(t, body) != 3 || strings.Contains(body, "local@file") {
		t.Errorf("192.0.2.7's scrape: %d decisions, want lan@file's 3 and nothing of local@file:\n%s", decisionCount(t, body), body)
	}
}

// TestMetricsAddressForms: metrics.address takes Traefik's forms of an
// address, each one listener, host names in any case; ":0" and
// "localhost:0" listen and serve.
func TestMetricsAddressForms(t *testing.T) {
	for in, want := range map[string]string{
		":9181":              ":9181",
		"127.0.0.1:9181":     "127.0.0.1:9181",
		"[::1]:9181":         "[::1]:9181",
		"[0:0::1]:9181":      "[::1]:9181",
		"localhost:9181":     "localhost:9181",
		"LocalHost:9181":     "localhost:9181",
		" metrics.lan:9181 ": "metrics.lan:9181",
	} {
		var errs options
		o := parseMetrics(&Metrics{Address: in}, false, &errs)
		if errs.err != nil || o.address != want {
			t.Errorf("metrics.address %q: %+v, %v; want %s", in, o, errs.err, want)
		}
	}
	for _, bad := range []string{"9181", "localhost", ":65536", ":-1", "-host:1", "a..b:1", "[::1:1"} {
		var errs options
		if parseMetrics(&Metrics{Address: bad}, false, &errs); errs.err == nil || !strings.HasPrefix(errs.err.Error(), "metrics.address ") {
			t.Errorf("metrics.address %q: %v, want an error naming it", bad, errs.err)
		}
	}
	g := metricsRegistry(t)
	g.mustNew(t, withMetrics(Config{Average: "1"}, ":0"), "all@file")
	g.mustNew(t, withMetrics(Config{Average: "1"}, "localhost:0"), "named@file")
	if body := scrape(t, g, ":0"); !strings.Contains(body, `zone="all@file"`) {
		t.Errorf("scrape of :0:\n%s", body)
	}
	if body := scrape(t, g, "localhost:0"); !strings.Contains(body, `zone="named@file"`) {
		t.Errorf("scrape of localhost:0:\n%s", body)
	}
}

// TestMetricsListenerRetry: an address that cannot be listened on (its
// port taken) costs no traffic: New succeeds, the middleware decides and
// counts, the error is logged once at error level naming
// metrics.address, however many routers and reloads name it, with one
// timer and no goroutine waiting; the listener opens once the port is
// free, serving what was counted meanwhile; and a listener dropped
// before it opens stops trying.
func TestMetricsListenerRetry(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	address := taken.Addr().String()

	// Reloads while the port is taken: retries far apart.
	g := metricsRegistry(t)
	g.timeouts = shortTimeouts
	g.timeouts.retryMin, g.timeouts.retryMax = time.Hour, time.Hour
	before := runtime.NumGoroutine()
	var h http.Handler
	for i := 0; i < 50; i++ { // routers and reloads, two configurations
		h, _ = g.mustNew(t, withMetrics(Config{Average: "3", Period: "1h", Burst: "3", Headers: []string{[]string{"legacy", "ietf"}[i%2]}}, address), "api@file")
	}
	if got := codes(h, request{}, 4); got != "200 200 200 429" {
		t.Errorf("codes %s, want the limit applied without metrics", got)
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("goroutines: %d before, %d after 50 calls of New on a taken port", before, after)
	}
	log := g.stderr.String()
	if n := strings.Count(log, `metrics.address "`+address+`"`); n != 1 || !strings.HasPrefix(log, `sluice api@file: metrics.address "`+address+`": listen tcp `) {
		t.Errorf("error log %q, want one line naming metrics.address and the error", log)
	}
	if strings.Contains(g.stdout.String(), "metrics") {
		t.Errorf("debug log %q, want the error at error level only", g.stdout.String())
	}
	g.mu.Lock()
	srv, n := g.servers[address], len(g.servers)
	g.mu.Unlock()
	if n != 1 || srv.refs != 2 || srv.retry == nil || srv.addr != nil {
		t.Fatalf("%d listeners, %+v; want 1, held by 2 entries, waiting to retry", n, srv)
	}

	// Retries soon: the listener opens once the port is free.
	g = metricsRegistry(t)
	g.timeouts = shortTimeouts
	h, _ = g.mustNew(t, withMetrics(Config{Average: "3", Period: "1h", Burst: "3"}, address), "api@file")
	codes(h, request{}, 4)
	time.Sleep(3 * shortTimeouts.retryMax) // a few retries fail
	taken.Close()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		g.mu.Lock()
		open := g.servers[address].addr != nil
		g.mu.Unlock()
		if open {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the listener did not open within 5s of the port's release; log:\n%s", g.stderr.String())
		}
	}
	hasLines(t, scrape(t, g, address), `sluice_decisions_total{zone="api@file",outcome="allowed"} 3`, `sluice_decisions_total{zone="api@file",outcome="rejected"} 1`)
	if log := g.stderr.String(); strings.Count(log, "listen tcp") != 1 || !strings.HasSuffix(log, `sluice api@file: metrics.address "`+address+`": serving metrics at last`+"\n") {
		t.Errorf("error log %q, want the failure once, then that it serves", log)
	}

	// Dropped before it opens: its timer stopped.
	again, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	g = metricsRegistry(t)
	g.timeouts = shortTimeouts
	g.maxVersions = 1
	g.mustNew(t, withMetrics(Config{Average: "1"}, again.Addr().String()), "api@file")
	g.mu.Lock()
	srv = g.servers[again.Addr().String()]
	g.mu.Unlock()
	g.mustNew(t, &Config{Average: "2"}, "api@file") // replaces it
	again.Close()
	time.Sleep(3 * shortTimeouts.retryMax)
	g.mu.Lock()
	defer g.mu.Unlock()
	if !srv.closed || srv.addr != nil || len(g.servers) != 0 {
		t.Errorf("a dropped listener: %+v, %d listeners; want it closed, never opened", srv, len(g.servers))
	}
}

// TestMetricsZones: GET /sluice/zones lists, in JSON, the zones of the
// middlewares the client may read, named as the metrics and the advice
// name them, with their middleware as Traefik names it and their limits;
// another client sees its own.
func TestMetricsZones(t *testing.T) {
	g := metricsRegistry(t)
	g.mustNew(t, withMetrics(Config{Average: "100", Period: "1m"}, anyPort), "api-limit@file")
	cfg := withMetrics(Config{MaxInFlight: "4", Limits: []LimitConfig{
		{Name: "per-key", Average: "5", Period: "1s", Burst: "10", Key: []string{"header:X-Key"}},
		{Name: "window", Average: "60", Period: "1m", Algorithm: "fixed_window"},
	}}, anyPort)
	cfg.Metrics.DemandKeys, cfg.Metrics.NearLimit = "off", "20%"
	g.mustNew(t, cfg, "multi@docker")
	g.mustNew(t, withMetrics(Config{Average: "1"}, anyPort, "192.0.2.0/24"), "lan@file")
	resp, body := get(t, g, anyPort, "/sluice/zones")
	var got zonesAnswer
	if err := json.Unmarshal([]byte(body), &got); resp.StatusCode != http.StatusOK || err != nil || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /sluice/zones: %d %s (%v)", resp.StatusCode, body, err)
	}
	want := []zoneInfo{
		{ID: "api-limit@file", Name: "default", Middleware: "api-limit@file", Algorithm: "token_bucket", Rate: "100/1m", Quota: 100, Period: 60, Burst: 1,
			NearLimit: 0.1, Store: "memory", Advice: "/sluice/zones/api-limit@file/advice"},
		{ID: "multi@docker/default", Name: "default", Middleware: "multi@docker", NearLimit: 0.2, MaxInFlight: 4, Store: "memory"},
		{ID: "multi@docker/per-key", Name: "per-key", Middleware: "multi@docker", Algorithm: "token_bucket", Rate: "5/1s", Quota: 5, Period: 1, Burst: 10,
			NearLimit: 0.2, Store: "memory"},
		{ID: "multi@docker/window", Name: "window", Middleware: "multi@docker", Algorithm: "fixed_window", Rate: "60/1m", Quota: 60, Period: 60, Burst: 60,
			NearLimit: 0.2, Store: "memory"},
	}
	if !reflect.DeepEqual(got.Zones, want) {
		t.Errorf("GET /sluice/zones:\n%s\nwant %+v", body, want)
	}
	r := httptest.NewRequest(http.MethodGet, "/sluice/zones", nil)
	r.RemoteAddr = "192.0.2.7:5000"
	w := httptest.NewRecorder()
	g.restricted(anyPort, writeZones, http.MethodGet)(w, r)
	if !strings.Contains(w.Body.String(), `"id":"lan@file"`) || strings.Contains(w.Body.String(), "api-limit") {
		t.Errorf("192.0.2.7's listing: %s, want lan@file's zone only", w.Body)
	}
	if resp, _ := call(t, g, anyPort, http.MethodDelete, "/sluice/zones"); resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("DELETE /sluice/zones: %d, want 405", resp.StatusCode)
	}
}

// TestMetricsRemovedMiddleware: Traefik gives New the context of the
// configuration it builds and cancels it when it applies the next one: a
// middleware that the next configuration does not create again leaves
// the scrape (its zones, histogram and breaker gauge) and the listing
// once goneAfter has passed since that is seen, while one it creates
// again stays, even if a scrape comes between the cancellation and its
// New; a configuration that names it again brings it back, counters
// kept.
func TestMetricsRemovedMiddleware(t *testing.T) {
	g := metricsRegistry(t)
	down := closedPort(t)
	newIn := func(ctx context.Context, cfg *Config, name string) http.Handler {
		t.Helper()
		h, err := g.new(ctx, &okHandler{}, cfg, name)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	onRedis := withMetrics(Config{Average: "100", Redis: &Redis{Endpoints: []string{down}, DialTimeout: "100ms"}}, anyPort)
	gen1, cancel1 := context.WithCancel(context.Background())
	kept := newIn(gen1, withMetrics(Config{Average: "100", Burst: "100"}, anyPort), "kept@file")
	codes(kept, request{}, 1)
	codes(newIn(gen1, onRedis, "removed@file"), request{}, 2)
	breaker := `sluice_store_breaker_state{store="` + down + `"}`
	if body := scrape(t, g, anyPort); !strings.Contains(body, `zone="removed@file"`) || !strings.Contains(body, breaker) {
		t.Fatalf("before the reload:\n%s", body)
	}

	cancel1() // Traefik applies a configuration without removed@file
	gen2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	if body := scrape(t, g, anyPort); !strings.Contains(body, `zone="kept@file"`) {
		t.Errorf("kept@file missing from a scrape between the cancellation and its New:\n%s", body)
	}
	kept = newIn(gen2, withMetrics(Config{Average: "100", Burst: "100"}, anyPort), "kept@file")
	codes(kept, request{}, 1)
	if body := scrape(t, g, anyPort); !strings.Contains(body, `zone="removed@file"`) {
		t.Errorf("removed@file gone before goneAfter:\n%s", body)
	}
	g.clock.advance(goneAfter)
	body := scrape(t, g, anyPort)
	if strings.Contains(body, "removed@file") || strings.Contains(body, breaker) {
		t.Errorf("removed@file still scraped goneAfter after its removal was seen:\n%s", body)
	}
	hasLines(t, body, `sluice_decisions_total{zone="kept@file",outcome="allowed"} 2`, `sluice_decision_seconds_count{middleware="kept@file"} 2`)
	if _, list := get(t, g, anyPort, "/sluice/zones"); strings.Contains(list, "removed@file") {
		t.Errorf("removed@file still listed: %s", list)
	}

	// A later configuration names it again: back, its counters kept.
	newIn(gen2, onRedis, "removed@file")
	hasLines(t, scrape(t, g, anyPort), `sluice_decisions_total{zone="removed@file",outcome="store_error_allowed"} 2`)

	// A configuration without either: the listener, which lives as long
	// as the registry keeps them, answers with nothing.
	cancel2()
	scrape(t, g, anyPort)
	g.clock.advance(goneAfter)
	if body := scrape(t, g, anyPort); strings.Contains(body, "sluice_") {
		t.Errorf("a scrape with every middleware removed:\n%s", body)
	}
	if _, list := get(t, g, anyPort, "/sluice/zones"); list != `{"zones":[]}`+"\n" {
		t.Errorf("the listing with every middleware removed: %s", list)
	}
}
