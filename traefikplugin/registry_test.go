package traefikplugin

import (
	"context"
	"net"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// TestRepeatedNew calls the package's New 1,000 times with the same
// configuration, as Traefik does once per router and on every reload, and
// checks that the counters are kept, one entry serves them all and no
// goroutine is left behind.
func TestRepeatedNew(t *testing.T) {
	out := &syncBuffer{}
	plugins.mu.Lock()
	stdout := plugins.stdout
	plugins.stdout = out
	plugins.mu.Unlock()
	defer func() {
		plugins.mu.Lock()
		plugins.stdout = stdout
		plugins.mu.Unlock()
	}()
	before := runtime.NumGoroutine()
	cfg := func() *Config { return &Config{Average: "1", Period: "1h", Burst: "3"} }
	const name = "repeat@file"
	next := &okHandler{}
	h, err := New(context.Background(), next, cfg(), name)
	if err != nil {
		t.Fatal(err)
	}
	req := request{remote: "198.51.100.77:1"}
	if got := codes(h, req, 2); got != "200 200" {
		t.Fatalf("first handler: got %s, want 200 200", got)
	}
	for i := 0; i < 1000; i++ {
		if h, err = New(context.Background(), next, cfg(), name); err != nil {
			t.Fatal(err)
		}
	}
	if got := codes(h, req, 2); got != "200 429" {
		t.Errorf("1001st handler: got %s, want 200 429 (the counters kept)", got)
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("goroutines: %d before, %d after 1001 calls of New", before, after)
	}
	if got := out.String(); got != "sluice repeat@file: 1 request rejected; later lines summarize at most every 10s\n" {
		t.Errorf("log: %q", got)
	}
	plugins.mu.Lock()
	n := 0
	for _, e := range plugins.entries {
		if e.name == name {
			n++
		}
	}
	plugins.mu.Unlock()
	if n != 1 {
		t.Errorf("%d registry entries for %s, want 1", n, name)
	}
}

// TestRoutersShareQuota checks that two routers using one middleware share
// its quota, and that two middlewares with the same settings do not.
func TestRoutersShareQuota(t *testing.T) {
	g := newTestRegistry()
	cfg := &Config{Average: "1", Period: "1h", Burst: "2"}
	a, nextA := g.mustNew(t, cfg, "shared@file")
	b, nextB := g.mustNew(t, &Config{Average: "1", Period: "1h", Burst: "2"}, "shared@file")
	if got := codes(a, request{}, 1) + " " + codes(b, request{}, 2); got != "200 200 429" {
		t.Errorf("two routers: got %s, want 200 200 429", got)
	}
	if nextA.count() != 1 || nextB.count() != 1 {
		t.Errorf("each router's next: %d and %d calls, want 1 and 1", nextA.count(), nextB.count())
	}
	other, _ := g.mustNew(t, cfg, "other@file")
	if got := codes(other, request{}, 3); got != "200 200 429" {
		t.Errorf("another middleware: got %s, want its own quota, 200 200 429", got)
	}
}

// TestChangedSetting checks that a reload with a changed setting takes
// effect at once and keeps the counters.
func TestChangedSetting(t *testing.T) {
	g := newTestRegistry()
	h, _ := g.mustNew(t, &Config{Average: "1", Period: "1h", Burst: "2"}, "api@file")
	if got := codes(h, request{}, 3); got != "200 200 429" {
		t.Fatalf("burst 2: got %s", got)
	}
	// Burst 5: the bucket has 3 tokens left of 5.
	h, _ = g.mustNew(t, &Config{Average: "1", Period: "1h", Burst: "5"}, "api@file")
	if got := codes(h, request{}, 4); got != "200 200 200 429" {
		t.Errorf("burst raised to 5: got %s, want 200 200 200 429", got)
	}
	w, _ := do(h, request{})
	if got := w.Header().Get("X-Ratelimit-Limit"); got != "1" {
		t.Errorf("X-RateLimit-Limit %q, want 1", got)
	}
	// Another header set is a new configuration with the same counters.
	h, _ = g.mustNew(t, &Config{Average: "1", Period: "1h", Burst: "5", Headers: []string{"legacy"}}, "api@file")
	w, _ = do(h, request{})
	if w.Code != 429 || w.Header().Get("Ratelimit-Limit") != "1" || w.Header().Get("X-Ratelimit-Limit") != "" {
		t.Errorf("legacy headers: %d %v", w.Code, w.Header())
	}
	// Back to the first configuration: its entry, the same counters.
	h, _ = g.mustNew(t, &Config{Average: "1", Period: "1h", Burst: "2"}, "api@file")
	if got := codes(h, request{}, 1); got != "429" {
		t.Errorf("burst 2 again: got %s, want 429", got)
	}
}

// TestRegistryBounded checks the registry's bounds: versions per name and
// entries in all, and that dropping the last entry of a Redis client
// closes it.
func TestRegistryBounded(t *testing.T) {
	g := newTestRegistry()
	g.maxVersions, g.maxEntries = 3, 8
	down := closedPort(t)
	before := runtime.NumGoroutine()
	for i := 0; i < 20; i++ {
		g.mustNew(t, &Config{Average: strconv.Itoa(i + 1), Redis: &Redis{Endpoints: []string{down}, DialTimeout: "100ms"}}, "churn@file")
	}
	g.mu.Lock()
	entries, clients := len(g.entries), len(g.redis)
	g.mu.Unlock()
	if entries != 3 || clients != 1 {
		t.Errorf("one name, 20 configurations: %d entries, %d Redis clients; want 3 and 1", entries, clients)
	}
	for i := 0; i < 20; i++ {
		g.mustNew(t, &Config{Average: "1"}, "mw"+strconv.Itoa(i)+"@file")
	}
	g.mu.Lock()
	entries, clients = len(g.entries), len(g.redis)
	g.mu.Unlock()
	if entries != 8 || clients != 0 {
		t.Errorf("20 more names: %d entries, %d Redis clients; want 8 and 0 (the Redis entries dropped first)", entries, clients)
	}
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("goroutines: %d before, %d after", before, after)
	}
	// The Redis client was created once, not per configuration.
	if got := strings.Count(g.stderr.String(), "unavailable"); got != 1 {
		t.Errorf("%d outage lines, want 1:\n%s", got, g.stderr.String())
	}
}

// TestNewErrors checks that New names the middleware and the option.
func TestNewErrors(t *testing.T) {
	g := newTestRegistry()
	_, err := g.new(context.Background(), &okHandler{}, &Config{Average: "1", Period: "fortnight"}, "api@file")
	if err == nil || !strings.HasPrefix(err.Error(), `sluice api@file: period "fortnight"`) {
		t.Errorf("got %v", err)
	}
	if _, err := g.new(context.Background(), nil, &Config{Average: "1"}, "api@file"); err == nil {
		t.Error("no next handler: got no error")
	}
	h, err := g.new(context.Background(), &okHandler{}, nil, "api@file")
	if err != nil || h == nil {
		t.Errorf("nil config: got %v, %v; want next", h, err)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestSkippedKeyNote: a limit keyed on a part the client may leave out,
// which then skips the limit by default, says so once at creation, at
// error level (the plugin's log package output, which Traefik shows at
// its default level), not at debug level (fmt, hidden by default).
func TestSkippedKeyNote(t *testing.T) {
	const note = `sluice api@file: limit "default": a request without header:X-API-Key is not limited by it (onMissingKey: skip)`
	g := newTestRegistry()
	g.mustNew(t, &Config{Average: "10", Key: []string{"header:X-API-Key"}}, "api@file")
	g.mustNew(t, &Config{Average: "10", Key: []string{"header:X-API-Key"}}, "api@file") // another router
	if got := g.stderr.String(); strings.Count(got, note) != 1 {
		t.Errorf("error log %q, want the note about header:X-API-Key once", got)
	}
	if got := g.stdout.String(); got != "" {
		t.Errorf("debug log %q, want nothing", got)
	}
	g = newTestRegistry()
	g.mustNew(t, &Config{Average: "10", Key: []string{"header:X-API-Key"}, OnMissingKey: "shared"}, "api@file")
	g.mustNew(t, &Config{Average: "10"}, "ip@file")
	if got := g.stdout.String() + g.stderr.String(); got != "" {
		t.Errorf("log %q, want nothing for shared or client_ip keys", got)
	}
}

// TestMaxKeys checks that a middleware with maxKeys has an in-memory store
// of its own, of that capacity: a flood of its keys fills only that store,
// never the process-wide one nor another middleware's; its reloads keep it
// and its counters; a changed maxKeys starts afresh; and the store goes
// with the last entry that uses it.
func TestMaxKeys(t *testing.T) {
	g := newTestRegistry()
	g.maxVersions = 1 // each reload drops the configuration it replaces
	keyed := func(maxKeys string) *Config {
		return &Config{Average: "1", Period: "1h", Burst: "2", Key: []string{"header:X-Key"}, MaxKeys: maxKeys}
	}
	flood, _ := g.mustNew(t, keyed("128"), "flood@file")
	other, _ := g.mustNew(t, &Config{Average: "1", Period: "1h", Key: []string{"header:X-Key"}}, "other@file")
	victim := request{headers: map[string]string{"X-Key": "victim"}}
	if got := codes(flood, victim, 3); got != "200 200 429" {
		t.Fatalf("flood@file's victim: got %s, want 200 200 429", got)
	}
	codes(other, victim, 1)
	n := 1000
	if testing.Short() {
		n = 300 // the interpreter
	}
	for i := 0; i < n; i++ {
		do(flood, request{headers: map[string]string{"X-Key": "k" + strconv.Itoa(i)}})
	}
	g.mu.Lock()
	own := g.own[ownStoreID("flood@file", 128)]
	shared := g.own[""].store
	g.mu.Unlock()
	if own == nil || own.store == shared {
		t.Fatalf("flood@file has no store of its own: %+v", own)
	}
	if own.store.Cap() != 128 || own.store.Len() > 128 {
		t.Errorf("own store: cap %d, %d states held; want 128 and at most 128", own.store.Cap(), own.store.Len())
	}
	if got := shared.Len(); got != 1 {
		t.Errorf("the process-wide store holds %d states after the flood, want 1 (other@file's victim)", got)
	}
	if got := codes(flood, victim, 1); got != "429" {
		t.Errorf("flood@file's spent victim after %d keys: got %s, want 429 (the state closest to expiring goes first)", n, got)
	}
	if got := codes(other, victim, 1); got != "429" {
		t.Errorf("other@file's spent victim: got %s, want 429", got)
	}

	// A reload with another setting but the same maxKeys: the same store.
	flood, _ = g.mustNew(t, &Config{Average: "1", Period: "1h", Burst: "3", Key: []string{"header:X-Key"}, MaxKeys: "128"}, "flood@file")
	if got := codes(flood, victim, 2); got != "200 429" {
		t.Errorf("burst 3, same maxKeys: got %s, want 200 429 (the counters kept)", got)
	}
	// Another maxKeys: a store of its own, counters afresh.
	flood, _ = g.mustNew(t, keyed("256"), "flood@file")
	if got := codes(flood, victim, 3); got != "200 200 429" {
		t.Errorf("maxKeys 256: got %s, want 200 200 429 (a new store)", got)
	}
	g.mu.Lock()
	_, kept := g.own[ownStoreID("flood@file", 128)]
	g.mu.Unlock()
	if kept {
		t.Error("the store of maxKeys 128 outlived every entry using it")
	}
}

// TestLimitedKeyKeptThroughFlood: with the built-in's default burst of 1, a
// spent key that keeps asking stays rejected through a flood of new keys
// ten times maxKeys (the lane's own path: serveLaneTB).
func TestLimitedKeyKeptThroughFlood(t *testing.T) {
	g := newTestRegistry()
	maxKeys := 6400
	if testing.Short() {
		maxKeys = 640 // the interpreter
	}
	flood, _ := g.mustNew(t, &Config{Average: "11", Period: "1h", Key: []string{"header:X-API-Key"}, MaxKeys: strconv.Itoa(maxKeys)}, "flood@file")
	victim := request{headers: map[string]string{"X-API-Key": "victim"}}
	if got := codes(flood, victim, 2); got != "200 429" {
		t.Fatalf("the victim: got %s, want 200 429", got)
	}
	for i := 0; i < 10*maxKeys; i++ {
		do(flood, request{headers: map[string]string{"X-API-Key": "k" + strconv.Itoa(i)}})
		if i%100 == 0 {
			if rec, _ := do(flood, victim); rec.Code != 429 {
				t.Fatalf("the spent victim after %d new keys: %d, want 429 (its state evicted)", i, rec.Code)
			}
		}
	}
}
