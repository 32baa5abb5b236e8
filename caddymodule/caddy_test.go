package caddymodule

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	dto "github.com/prometheus/client_model/go"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Helpers that run Caddy in this process, one config at a time (Caddy's
// running config is global, so these tests do not run in parallel).

// freePorts returns n distinct free TCP ports on 127.0.0.1.
func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	for len(ports) < n {
		p, err := redistest.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	return ports
}

// server is one HTTP server of a test config: a sluice handler followed by
// a static response whose body shows the sluice placeholders.
type server struct {
	port    int
	handler map[string]any // the sluice handler's JSON, without "handler"
	extra   map[string]any // extra fields of the server's JSON
}

// respondBody is the static response after the sluice handler.
const respondBody = "zone={http.sluice.zone} remaining={http.sluice.remaining} rejected={http.sluice.rejected}"

// loadCaddy (re)loads Caddy with servers and returns their base URLs. The
// config is stopped when the test ends.
func loadCaddy(t *testing.T, servers ...server) []string {
	t.Helper()
	return loadCaddyAdmin(t, 0, servers...)
}

// loadCaddyAdmin is loadCaddy with Caddy's admin endpoint listening on
// 127.0.0.1:adminPort (0: disabled).
func loadCaddyAdmin(t *testing.T, adminPort int, servers ...server) []string {
	t.Helper()
	srvs := map[string]any{}
	urls := make([]string, len(servers))
	for i, s := range servers {
		h := map[string]any{"handler": "sluice"}
		for k, v := range s.handler {
			h[k] = v
		}
		srv := map[string]any{
			"listen":          []string{"127.0.0.1:" + strconv.Itoa(s.port)},
			"automatic_https": map[string]any{"disable": true},
			"routes": []any{map[string]any{"handle": []any{
				h,
				map[string]any{"handler": "static_response", "body": respondBody},
			}}},
		}
		for k, v := range s.extra {
			srv[k] = v
		}
		srvs["srv"+strconv.Itoa(i)] = srv
		urls[i] = "http://127.0.0.1:" + strconv.Itoa(s.port)
	}
	admin := map[string]any{"disabled": true, "config": map[string]any{"persist": false}}
	if adminPort != 0 {
		admin = map[string]any{"listen": "127.0.0.1:" + strconv.Itoa(adminPort), "config": map[string]any{"persist": false}}
	}
	cfg := map[string]any{
		"admin":   admin,
		"logging": map[string]any{"logs": map[string]any{"default": map[string]any{"level": "WARN"}}},
		"apps":    map[string]any{"http": map[string]any{"servers": srvs}},
	}
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := caddy.Load(raw, true); err != nil {
		t.Fatalf("loading config: %v\n%s", err, raw)
	}
	// A reload closes the previous servers' idle connections.
	client.CloseIdleConnections()
	t.Cleanup(func() { _ = caddy.Stop() })
	return urls
}

// zone builds one element of a handler's "zones": its name, its rate,
// then more field/value pairs.
func zone(name, rate string, more ...any) map[string]any {
	z := map[string]any{"name": name, "rate": rate}
	for i := 0; i+1 < len(more); i += 2 {
		z[more[i].(string)] = more[i+1]
	}
	return z
}

var client = &http.Client{Timeout: 10 * time.Second}

// response is what a test request got.
type response struct {
	status int
	header http.Header
	body   string
}

// get requests url with the given header pairs.
func get(t *testing.T, url string, header ...string) response {
	t.Helper()
	r, err := fetch(url, header...)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// fetch requests url with the given header pairs; it is safe to call from
// any goroutine. A request whose connection closes before any answer is
// sent once more: right after a reload, the previous config's server may
// still accept a new connection on the shared listener and then close it
// unanswered as it stops (an EOF, or a reset when it closes with the
// request unread, so that the request was never decided).
func fetch(url string, header ...string) (response, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return response{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	res, err := client.Do(req)
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		res, err = client.Do(req)
	}
	if err != nil {
		return response{}, err
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		return response{}, err
	}
	return response{res.StatusCode, res.Header, string(body)}, nil
}

// wantStatus checks the statuses of requests to url, in order.
func wantStatus(t *testing.T, url string, want []int, header ...string) []response {
	t.Helper()
	out := make([]response, len(want))
	for i, w := range want {
		out[i] = get(t, url, header...)
		if out[i].status != w {
			t.Fatalf("request %d to %s: status %d, want %d (body %q)", i+1, url, out[i].status, w, out[i].body)
		}
	}
	return out
}

// repeat returns n copies of status.
func repeat(status, n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = status
	}
	return s
}

// siteID is the ID of the zone called name of the test server on port:
// its only route has no matchers, so its site is its port.
func siteID(name string, port int) string {
	return name + "@:" + strconv.Itoa(port)
}

// sorted returns s sorted.
func sorted(s ...string) []string {
	sort.Strings(s)
	return s
}

// counter returns sluice_decisions_total{zone, outcome} of the
// running config's registry; zone is the zone's ID.
func counter(t *testing.T, zone, outcome string) float64 {
	t.Helper()
	for _, m := range family(t, "sluice_decisions_total").GetMetric() {
		if label(m, "zone") == zone && label(m, "outcome") == outcome {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// decisionTimes returns the count of sluice_decision_seconds in the
// running config's registry: it counts every decision of the process.
func decisionTimes(t *testing.T) uint64 {
	t.Helper()
	if f := family(t, "sluice_decision_seconds"); f != nil {
		return f.GetMetric()[0].GetHistogram().GetSampleCount()
	}
	return 0
}

// family returns the metric family called name, or nil.
func family(t *testing.T, name string) *dto.MetricFamily {
	t.Helper()
	ctx := caddy.ActiveContext()
	families, err := ctx.GetMetricsRegistry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f
		}
	}
	return nil
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// wantBody checks that a response's body (the placeholders) contains want.
func wantBody(t *testing.T, r response, want string) {
	t.Helper()
	if !strings.Contains(r.body, want) {
		t.Errorf("body %q, want it to contain %q", r.body, want)
	}
}
