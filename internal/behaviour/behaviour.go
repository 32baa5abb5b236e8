// Package behaviour reads the behaviour table, testdata/behaviour/*.json at
// the top of the module: limit configurations written once, each with a
// trace of requests on a fake clock and the statuses and headers they must
// get. The Caddy module's, the Traefik plugin's and the Go middleware's
// (sluicehttp) tests render each case in their host's configuration and
// replay it, so that one configuration meaning the same in every host is
// a test; testdata/README.md describes the format and lists every
// intended difference between the hosts.
//
// It uses the standard library only and runs under Yaegi, which the
// Traefik plugin's tests run in.
package behaviour

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Dir is the table's directory as seen from an adapter's package
// directory, where its tests run.
var Dir = filepath.Join("..", "testdata", "behaviour")

// Start is the instant at which every trace begins, in Unix seconds
// (2023-11-14T22:13:20Z): a step's At counts from it, and the table's
// X-RateLimit-Reset values are Unix times on this clock.
const Start = int64(1700000000)

// UpstreamHeader is the request header by which a replay tells the
// upstream what to answer: every step's requests carry the step's
// UpstreamStatus in it, and each host's upstream (Upstream in Go, a
// respond whose status is this header's placeholder in Caddy) answers
// that status.
const UpstreamHeader = "X-Upstream-Status"

// UpstreamHeaderPrefix begins the request headers by which a replay asks
// the upstream for response headers: a step's UpstreamHeaders, each sent
// as this prefix and the header's name, which the upstream answers
// without the prefix (Upstream in Go, a header handler per name in
// Caddy).
const UpstreamHeaderPrefix = "X-Upstream-Header-"

// UpstreamBody is the request header that carries the body the upstream
// answers: a step's UpstreamBytes bytes.
const UpstreamBody = "X-Upstream-Body"

// DefaultPeer is the address a step's request comes from when it names
// none.
const DefaultPeer = "192.0.2.1"

// The hosts, as a case's Only names them, and the Go middleware
// (sluicehttp), which replays the cases that name no host.
const (
	Caddy      = "caddy"
	Traefik    = "traefik"
	SluiceHTTP = "sluicehttp"
)

// Case is one file of the table.
type Case struct {
	// Name is the file's name without ".json".
	Name string `json:"-"`
	// About says what the case shows.
	About string `json:"about"`
	// Limits are decided together, all-or-nothing, in this order: Caddy
	// zones, Traefik's top-level limit and then its limits items.
	Limits []Limit `json:"limits"`
	// Headers, Body and Mode are the handler's or middleware's options of
	// those names; empty means the hosts' default (the same in both).
	Headers []string `json:"headers"`
	Body    string   `json:"body"`
	Mode    string   `json:"mode"`
	// TrustedProxies are the peers whose forwarding headers name the
	// client: Caddy's global trusted_proxies static, Traefik's
	// trustedProxies.
	TrustedProxies []string `json:"trusted_proxies"`
	// TrustedProxiesStrict sets Caddy's trusted_proxies_strict; Traefik
	// with trustedProxies always walks the header that way.
	TrustedProxiesStrict bool `json:"trusted_proxies_strict"`
	// IPv6Prefix groups IPv6 clients by this prefix length: Caddy's
	// ipv6_prefix on every zone keyed on the client address alone,
	// Traefik's sourceCriterion.ipStrategy.ipv6Subnet.
	IPv6Prefix int `json:"ipv6_prefix"`
	// Only, when set, names the one host ("caddy" or "traefik") whose
	// behaviour the case shows, with the reason the other cannot express
	// it; For leaves the case out of the other hosts' replays.
	Only map[string]string `json:"only"`
	// Steps are the trace, in time order.
	Steps []Step `json:"steps"`
}

// Limit is one limit of a case, in the Caddyfile's words.
type Limit struct {
	Name string `json:"name"`
	// Algorithm is empty for token_bucket, both hosts' default.
	Algorithm string `json:"algorithm"`
	// Rate is "<quota>/<period>" with the period a Go duration ("3/1m",
	// "10/1s"), which both hosts read.
	Rate string `json:"rate"`
	// Burst, MaxDelay and Cost are left out (0, "", 0) for the hosts'
	// defaults; a token_bucket limit must write Burst and MaxDelay,
	// whose defaults differ between the hosts.
	Burst    float64 `json:"burst"`
	MaxDelay string  `json:"max_delay"`
	Cost     float64 `json:"cost"`
	// Penalty, a Go duration, holds out a key the limit refuses (Caddy's
	// penalty, Traefik's penalty); empty for none.
	Penalty string `json:"penalty"`
	// Key lists the key's parts in the Traefik plugin's syntax:
	// client_ip, host, header:<Name>, query:<name>, cookie:<name>,
	// const:<value>. Empty means client_ip.
	Key []string `json:"key"`
	// OnMissingKey is skip (empty: both hosts' default for an explicit
	// key) or shared.
	OnMissingKey string `json:"on_missing_key"`
	// CountStatus limits only the responses of these statuses, each a
	// code ("401") or a class ("4xx"): Caddy's count_status, Traefik's
	// countStatus, sluicehttp's Limit.CountStatus. Empty counts every
	// response.
	CountStatus []string `json:"count_status"`
	// CostHeader takes a request's cost from this response header, and
	// CostBytes from the response body's bytes: Caddy's cost_header and
	// cost_bytes, Traefik's costHeader and costBytes, sluicehttp's
	// Limit.CostHeader and Limit.CostBytes. Cost is then the estimate
	// charged when a request is admitted, 0 when left out.
	CostHeader string `json:"cost_header"`
	CostBytes  bool   `json:"cost_bytes"`
}

// Step is one instant of a trace: N identical requests.
type Step struct {
	// At is the instant of the requests, in milliseconds after Start.
	At int64 `json:"at"`
	// Peer is the address the connection comes from; empty means
	// DefaultPeer.
	Peer string `json:"peer"`
	// Host is the request's Host; empty means example.com.
	Host string `json:"host"`
	// Header holds request headers: a header's value, or its lines in
	// order, as a list of strings.
	Header map[string]interface{} `json:"header"`
	// Query is the request's raw query, without "?": the URL is
	// "/?<Query>", or "/" when it is empty.
	Query string `json:"query"`
	// N is the number of requests; 0 means 1.
	N int `json:"n"`
	// Upstream is the status the upstream answers each request it is
	// given (UpstreamHeader carries it); 0 means 200. It is never 429,
	// which could not be told from a refusal.
	Upstream int `json:"upstream"`
	// UpstreamHeaders are the headers the upstream answers each request
	// with (such as {"X-Tokens-Used": "300"}), and UpstreamBytes the
	// bytes of its body, each "x"; the replay sends them in the request
	// headers UpstreamHeaderPrefix+name and UpstreamBody.
	UpstreamHeaders map[string]string `json:"upstream_header"`
	UpstreamBytes   int               `json:"upstream_bytes"`
	// Status is what every one of the N requests must get: 429, refused,
	// or the upstream's status, admitted.
	Status int `json:"status"`
	// Want holds response headers the last request must carry with
	// exactly these values; "" means the header must be absent.
	Want map[string]string `json:"want"`
	// Body, when set, is the last response's whole body.
	Body string `json:"body"`
}

// Load reads and checks every case in dir, in file name order.
func Load(dir string) ([]Case, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no *.json cases", dir)
	}
	sort.Strings(files)
	cases := make([]Case, 0, len(files))
	for _, f := range files {
		c, err := load(f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		cases = append(cases, c)
	}
	return cases, nil
}

// For returns the cases of cases that host replays: those without Only,
// and those whose Only names host.
func For(cases []Case, host string) []Case {
	var mine []Case
	for _, c := range cases {
		if len(c.Only) == 0 || c.Only[host] != "" {
			mine = append(mine, c)
		}
	}
	return mine
}

func load(file string) (Case, error) {
	var c Case
	data, err := os.ReadFile(file)
	if err != nil {
		return c, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, err
	}
	c.Name = strings.TrimSuffix(filepath.Base(file), ".json")
	return c, c.check()
}

// check refuses a case the table's format does not allow, or that would
// mean different things in the two hosts.
func (c *Case) check() error {
	if c.About == "" {
		return errors.New("about: required")
	}
	if len(c.Limits) == 0 {
		return errors.New("limits: at least one")
	}
	names := map[string]bool{}
	for i, l := range c.Limits {
		if err := l.check(); err != nil {
			return fmt.Errorf("limits[%d]: %w", i, err)
		}
		if names[l.Name] {
			return fmt.Errorf("limits[%d]: name %q used twice", i, l.Name)
		}
		names[l.Name] = true
	}
	for host, why := range c.Only {
		if host != Caddy && host != Traefik || why == "" {
			return fmt.Errorf("only: want caddy or traefik with a reason, got %q: %q", host, why)
		}
	}
	if len(c.Only) > 1 {
		return errors.New("only: one host, or leave it out for both")
	}
	if len(c.Steps) == 0 {
		return errors.New("steps: at least one")
	}
	last := int64(0)
	for i, s := range c.Steps {
		if s.At < last {
			return fmt.Errorf("steps[%d]: at %d is before the previous step's %d", i, s.At, last)
		}
		last = s.At
		if s.Upstream != 0 && (s.Upstream < 200 || s.Upstream > 599 || s.Upstream == http.StatusTooManyRequests) {
			return fmt.Errorf("steps[%d]: upstream %d: want a status from 200 to 599 but 429, which could not be told from a refusal", i, s.Upstream)
		}
		if s.Status != http.StatusTooManyRequests && s.Status != s.UpstreamStatus() {
			return fmt.Errorf("steps[%d]: status %d: want 429 or the upstream's %d", i, s.Status, s.UpstreamStatus())
		}
		if s.N < 0 {
			return fmt.Errorf("steps[%d]: n %d: want at least 1 (0: 1)", i, s.N)
		}
		if s.UpstreamBytes < 0 || s.UpstreamBytes > 1<<16 {
			return fmt.Errorf("steps[%d]: upstream_bytes %d: want 0 to 65536", i, s.UpstreamBytes)
		}
		for name := range s.UpstreamHeaders {
			if name == "" || strings.ContainsAny(name, " :\t\r\n") {
				return fmt.Errorf("steps[%d]: upstream_header %q: not a header name", i, name)
			}
		}
		for name, v := range s.Header {
			if _, ok := headerLines(v); !ok {
				return fmt.Errorf("steps[%d]: header %s: want a string or a list of strings", i, name)
			}
			if c := http.CanonicalHeaderKey(name); c == UpstreamHeader || c == UpstreamBody || strings.HasPrefix(c, UpstreamHeaderPrefix) {
				return fmt.Errorf("steps[%d]: header %s: the replay's own; write upstream, upstream_header or upstream_bytes", i, name)
			}
		}
	}
	return nil
}

func (l Limit) check() error {
	if l.Name == "" {
		return errors.New("name: required")
	}
	if _, _, err := l.split(); err != nil {
		return err
	}
	if l.Alg() == "token_bucket" && (l.Burst == 0 || l.MaxDelay == "") {
		return errors.New("a token_bucket writes burst and max_delay: unset, Caddy's burst is the quota and Traefik's 1, Caddy's max_delay 0 and Traefik's 1/(2·rate)")
	}
	if l.MaxDelay != "" {
		if _, err := time.ParseDuration(l.MaxDelay); err != nil {
			return fmt.Errorf("max_delay %q: %w", l.MaxDelay, err)
		}
	}
	if l.Penalty != "" {
		if _, err := time.ParseDuration(l.Penalty); err != nil {
			return fmt.Errorf("penalty %q: %w", l.Penalty, err)
		}
	}
	switch l.OnMissingKey {
	case "", "skip", "shared":
	default:
		return fmt.Errorf("on_missing_key %q: want skip or shared", l.OnMissingKey)
	}
	if l.CostHeader != "" && l.CostBytes {
		return errors.New("cost_header, cost_bytes: one of them")
	}
	for _, st := range l.CountStatus {
		if !statusOrClass(st) {
			return fmt.Errorf("count_status %q: want a status code from 100 to 599 or a class from 1xx to 5xx", st)
		}
	}
	parts := l.KeyParts()
	for _, p := range parts {
		kind, arg, _ := strings.Cut(p, ":")
		switch {
		case (kind == "client_ip" || kind == "host") && arg == "":
		case (kind == "header" || kind == "query" || kind == "cookie" || kind == "const") && arg != "":
		default:
			return fmt.Errorf("key part %q: want client_ip, host, header:<Name>, query:<name>, cookie:<name> or const:<value>", p)
		}
		if kind == "client_ip" && len(parts) > 1 {
			return errors.New("key: client_ip only alone (in a Caddy key template of several parts it is Caddy's own client_ip, read differently)")
		}
	}
	return nil
}

// statusOrClass reports whether s is a status code, "100" to "599", or a
// class, "1xx" to "5xx".
func statusOrClass(s string) bool {
	if len(s) != 3 || s[0] < '1' || s[0] > '5' {
		return false
	}
	if s[1:] == "xx" {
		return true
	}
	return s[1] >= '0' && s[1] <= '9' && s[2] >= '0' && s[2] <= '9'
}

// split returns the quota and the period of the limit's rate.
func (l Limit) split() (string, string, error) {
	q, p, ok := strings.Cut(l.Rate, "/")
	if !ok {
		return "", "", fmt.Errorf("rate %q: want <quota>/<Go duration>", l.Rate)
	}
	if _, err := strconv.ParseFloat(q, 64); err != nil {
		return "", "", fmt.Errorf("rate %q: quota: %w", l.Rate, err)
	}
	if _, err := time.ParseDuration(p); err != nil {
		return "", "", fmt.Errorf("rate %q: period: want a Go duration such as 1m: %w", l.Rate, err)
	}
	return q, p, nil
}

// Quota is the rate's quota, as written.
func (l Limit) Quota() string {
	q, _, _ := l.split()
	return q
}

// Period is the rate's period, a Go duration as written.
func (l Limit) Period() string {
	_, p, _ := l.split()
	return p
}

// Alg is the limit's algorithm, token_bucket when left out.
func (l Limit) Alg() string {
	if l.Algorithm == "" {
		return "token_bucket"
	}
	return l.Algorithm
}

// KeyParts is the limit's key, client_ip when left out.
func (l Limit) KeyParts() []string {
	if len(l.Key) == 0 {
		return []string{"client_ip"}
	}
	return l.Key
}

// Missing is the limit's on_missing_key, skip when left out.
func (l Limit) Missing() string {
	if l.OnMissingKey == "" {
		return "skip"
	}
	return l.OnMissingKey
}

// Number writes a burst or a cost as the table's hosts read it.
func Number(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// Count is the number of requests of the step.
func (s Step) Count() int {
	if s.N == 0 {
		return 1
	}
	return s.N
}

// UpstreamStatus is the status the upstream answers the step's requests,
// 200 when Upstream is left out.
func (s Step) UpstreamStatus() int {
	if s.Upstream == 0 {
		return http.StatusOK
	}
	return s.Upstream
}

// RemoteAddr is the step's peer as http.Request.RemoteAddr holds it.
func (s Step) RemoteAddr() string {
	peer := s.Peer
	if peer == "" {
		peer = DefaultPeer
	}
	return net.JoinHostPort(peer, "1234")
}

// RequestHost is the step's Host.
func (s Step) RequestHost() string {
	if s.Host == "" {
		return "example.com"
	}
	return s.Host
}

// Request returns a new request of the step: a GET of the step's query
// from its peer to its host, with its header lines, UpstreamHeader naming
// the status the upstream answers, and the headers that carry the
// upstream's headers and body.
func (s Step) Request() *http.Request {
	target := "/"
	if s.Query != "" {
		target += "?" + s.Query
	}
	r := httptest.NewRequest(http.MethodGet, target, nil)
	r.RemoteAddr = s.RemoteAddr()
	r.Host = s.RequestHost()
	for name, v := range s.Header {
		lines, _ := headerLines(v)
		for _, line := range lines {
			r.Header.Add(name, line)
		}
	}
	r.Header.Set(UpstreamHeader, strconv.Itoa(s.UpstreamStatus()))
	for name, v := range s.UpstreamHeaders {
		r.Header.Set(UpstreamHeaderPrefix+name, v)
	}
	if s.UpstreamBytes > 0 {
		r.Header.Set(UpstreamBody, strings.Repeat("x", s.UpstreamBytes))
	}
	return r
}

// Upstream is the upstream of the replays in Go (the Traefik plugin's and
// sluicehttp's next handler): it answers the status that the request's
// UpstreamHeader names, and 500 when the header is missing or not a
// number, as Caddy's respond does with that header's placeholder; the
// headers that the request's UpstreamHeaderPrefix headers name; and the
// body of its UpstreamBody header.
func Upstream(w http.ResponseWriter, r *http.Request) {
	status, err := strconv.Atoi(r.Header.Get(UpstreamHeader))
	if err != nil {
		status = http.StatusInternalServerError
	}
	for name, v := range r.Header {
		if strings.HasPrefix(name, UpstreamHeaderPrefix) {
			w.Header()[name[len(UpstreamHeaderPrefix):]] = v
		}
	}
	w.WriteHeader(status)
	if body := r.Header.Get(UpstreamBody); body != "" {
		_, _ = w.Write([]byte(body))
	}
}

// UpstreamHeaderNames returns the names of every step's UpstreamHeaders,
// sorted, each once: the headers a Caddy upstream must be able to answer.
func (c Case) UpstreamHeaderNames() []string {
	seen := map[string]bool{}
	var names []string
	for _, s := range c.Steps {
		for name := range s.UpstreamHeaders {
			if n := http.CanonicalHeaderKey(name); !seen[n] {
				seen[n] = true
				names = append(names, n)
			}
		}
	}
	sort.Strings(names)
	return names
}

// headerLines returns the lines of a Header value: a string is one line,
// a list of strings is a line each. ok is false for anything else.
func headerLines(v interface{}) ([]string, bool) {
	switch v := v.(type) {
	case string:
		return []string{v}, true
	case []interface{}:
		lines := make([]string, len(v))
		for i, line := range v {
			s, ok := line.(string)
			if !ok {
				return nil, false
			}
			lines[i] = s
		}
		return lines, len(lines) > 0
	}
	return nil, false
}

// Instant is the step's instant in Unix nanoseconds.
func (s Step) Instant() int64 {
	return Start*int64(time.Second) + s.At*int64(time.Millisecond)
}

// Replay sends the case's trace to h, each step's requests after setNow
// has set the host's fake clock to the step's instant (Unix nanoseconds),
// and returns one line per difference from what the table wants, naming
// the step and the request.
func (c Case) Replay(h http.Handler, setNow func(ns int64)) []string {
	var diffs []string
	for i, s := range c.Steps {
		setNow(s.Instant())
		for n := 0; n < s.Count(); n++ {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, s.Request())
			for _, d := range s.Check(n, w.Code, w.Header(), w.Body.String()) {
				diffs = append(diffs, fmt.Sprintf("steps[%d] (at %d ms), request %d: %s", i, s.At, n+1, d))
			}
		}
	}
	return diffs
}

// Run replays, each in a subtest of t named after it, the cases in Dir
// that host replays: build returns the handler a case's trace is sent to,
// the function that sets the host's fake clock (Replay's setNow), and the
// case's configuration in the host's words, which a failed case logs.
func Run(t *testing.T, host string, build func(t *testing.T, c Case) (h http.Handler, setNow func(ns int64), config string)) {
	t.Helper()
	cases, err := Load(Dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range For(cases, host) {
		c := c // Yaegi: pre-Go 1.22 loop variables
		t.Run(c.Name, func(t *testing.T) {
			h, setNow, config := build(t, c)
			for _, d := range c.Replay(h, setNow) {
				t.Error(d)
			}
			if t.Failed() {
				t.Log(config)
			}
		})
	}
}

// Check compares the response to request i of the step (0 to Count()-1)
// with what the table wants, returning one line per difference.
func (s Step) Check(i, status int, h http.Header, body string) []string {
	var diffs []string
	if status != s.Status {
		diffs = append(diffs, fmt.Sprintf("status %d, want %d", status, s.Status))
	}
	if i != s.Count()-1 {
		return diffs
	}
	keys := make([]string, 0, len(s.Want))
	for k := range s.Want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		want := s.Want[k]
		got, ok := h[http.CanonicalHeaderKey(k)]
		switch {
		case want == "" && ok:
			diffs = append(diffs, fmt.Sprintf("%s: %q, want none", k, got))
		case want != "" && (len(got) != 1 || got[0] != want):
			diffs = append(diffs, fmt.Sprintf("%s: %q, want %q", k, got, want))
		}
	}
	if s.Body != "" && body != s.Body {
		diffs = append(diffs, fmt.Sprintf("body %q, want %q", body, s.Body))
	}
	return diffs
}
