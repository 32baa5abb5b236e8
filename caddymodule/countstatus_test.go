package caddymodule

import (
	"errors"
	"net/http"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestCountStatus: a zone of 2 failures a minute counting 401 and 5xx
// passes successes however many, and refuses the third failure before
// next sees it. next's writer flushes (through Unwrap, as Caddy's modules do) and
// hijacks. An upstream error
// counts by its status (a 504 counts, a 404 does not), a client gone
// keeps its charge, and so does a panic in next.
func TestCountStatus(t *testing.T) {
	h := &Handler{Zones: []*Zone{{Name: "login", Rate: "2/m", Burst: 2, CountStatus: []string{"401", "5xx"}}}}
	provisionHandler(t, h)
	var flusher, hijacker bool
	send := func(ip string, gone bool, next func(http.ResponseWriter) error) (int, bool) {
		called := false
		w, err := serveNext(h, gone, ip, caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
			called = true
			flusher = http.NewResponseController(w).Flush() == nil // as Caddy's reverse_proxy flushes
			_, hijacker = w.(http.Hijacker)
			return next(w)
		}))
		var he caddyhttp.HandlerError
		if errors.As(err, &he) {
			return he.StatusCode, called
		}
		return w.Code, called
	}
	status := func(code int) func(http.ResponseWriter) error {
		return func(w http.ResponseWriter) error { w.WriteHeader(code); return nil }
	}
	for i := 0; i < 10; i++ {
		if c, _ := send("198.51.100.1", false, status(200)); c != 200 {
			t.Fatalf("success %d: %d", i, c)
		}
	}
	if !flusher || !hijacker {
		t.Errorf("next's writer: Flusher %v, Hijacker %v; want both", flusher, hijacker)
	}
	if c, _ := send("198.51.100.1", false, func(http.ResponseWriter) error { return caddyhttp.Error(404, errors.New("no")) }); c != 404 {
		t.Fatalf("404 error: %d", c)
	}
	if c, _ := send("198.51.100.1", false, status(401)); c != 401 {
		t.Fatalf("first failure: %d", c)
	}
	if c, _ := send("198.51.100.1", false, func(http.ResponseWriter) error { return caddyhttp.Error(504, errors.New("timeout")) }); c != 504 {
		t.Fatalf("upstream timeout: %d", c)
	}
	if c, called := send("198.51.100.1", false, status(401)); c != 429 || called {
		t.Fatalf("third failure: %d, next called %v; want 429 before next", c, called)
	}

	// Cut short: a client gone (answered 200) and a panic keep their charge.
	send("198.51.100.2", true, status(200))
	func() {
		defer func() { _ = recover() }()
		send("198.51.100.2", false, func(http.ResponseWriter) error { panic("upstream") })
	}()
	if c, _ := send("198.51.100.2", false, status(200)); c != 429 {
		t.Errorf("after a client gone and a panic: %d, want 429", c)
	}
}

// TestCostAborted: a response that next aborts by a panic once it began,
// as reverse_proxy aborts one whose client left or whose upstream broke
// off, is charged the cost its header states, beyond the estimate; a
// panic before the response keeps the estimate. The panic goes on.
func TestCostAborted(t *testing.T) {
	h := &Handler{Zones: []*Zone{{Name: "tokens", Rate: "10/h", Burst: 10, Cost: "1", CostHeader: "X-Cost"}}}
	provisionHandler(t, h)
	const ip = "198.51.100.3"
	abort := func(cost string) {
		defer func() {
			if p := recover(); p != http.ErrAbortHandler {
				t.Fatalf("recovered %v, want http.ErrAbortHandler", p)
			}
		}()
		serveNext(h, false, ip, caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
			if cost != "" {
				w.Header().Set("X-Cost", cost)
				w.Write([]byte("data: 0\n\n"))
			}
			panic(http.ErrAbortHandler)
		}))
		t.Fatal("the panic did not reach the caller")
	}
	remaining := func() string {
		w, err := serveNext(h, false, ip, caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
			w.Header().Set("X-Cost", "0")
			return nil
		}))
		if err != nil {
			t.Fatal(err)
		}
		return w.Header().Get("X-RateLimit-Remaining") // after this request's estimate
	}
	abort("6") // 6 charged: 4 left
	if got := remaining(); got != "3" {
		t.Fatalf("after a response of cost 6 aborted: remaining %s, want 3", got)
	}
	abort("") // the estimate kept: 3 left
	if got := remaining(); got != "2" {
		t.Fatalf("after a panic before the response: remaining %s, want 2", got)
	}
}

// TestCountStatusEarlyHints: an informational status (Early Hints' 103)
// is not the response's: a 502 that follows it counts as 5xx.
func TestCountStatusEarlyHints(t *testing.T) {
	h := &Handler{Zones: []*Zone{{Name: "errors", Rate: "2/m", Burst: 2, CountStatus: []string{"5xx"}}}}
	provisionHandler(t, h)
	hintsThen502 := caddyhttp.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) error {
		w.Header().Set("Link", "</style.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		return caddyhttp.Error(http.StatusBadGateway, errors.New("upstream gone"))
	})
	for i := 0; i < 2; i++ {
		if _, err := serveNext(h, false, "198.51.100.4", hintsThen502); err == nil {
			t.Fatalf("request %d: no error from next", i+1)
		}
	}
	w, err := serveNext(h, false, "198.51.100.4", hintsThen502)
	if err != nil || w.Code != http.StatusTooManyRequests {
		t.Fatalf("after two 502s behind Early Hints: %d, %v; want 429", w.Code, err)
	}
}
