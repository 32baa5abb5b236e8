package sluicehttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/sluicehttp"
)

// TestCountStatus: a limit of 2 failures a minute counts only the
// responses 401 and 403: successes pass however many, failures are
// refused after the second, before the next handler sees them. The next
// handler's writer still flushes and hijacks. A request cut short keeps
// its charge: the client gone (a 200 then) and a panic in the next
// handler.
func TestCountStatus(t *testing.T) {
	var status int
	var flusher, hijacker bool
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, flusher = w.(http.Flusher)
		_, hijacker = w.(http.Hijacker)
		if status < 0 {
			panic("upstream")
		}
		w.WriteHeader(status)
	})
	mw := newMW(t, sluicehttp.Config{Limits: []sluicehttp.Limit{{Name: "login", Rate: "2/m", CountStatus: []string{"401", "403"}}}})
	hd := mw.Handler(next)
	send := func(st int, peer string) int {
		status = st
		return serve(hd, peer).Code
	}
	for i := 0; i < 10; i++ {
		if c := send(200, "192.0.2.1:1"); c != 200 {
			t.Fatalf("success %d answered %d", i, c)
		}
	}
	if !flusher || !hijacker {
		t.Errorf("the next handler's writer: Flusher %v, Hijacker %v; want both", flusher, hijacker)
	}
	if a, b, c := send(401, "192.0.2.1:1"), send(403, "192.0.2.1:1"), send(401, "192.0.2.1:1"); a != 401 || b != 403 || c != 429 {
		t.Errorf("failures answered %d %d %d, want 401 403 429", a, b, c)
	}
	if c := send(200, "192.0.2.1:1"); c != 429 {
		t.Errorf("a client over the limit: %d, want 429 before the handler", c)
	}

	// Cut short: a client gone keeps its 200's charge.
	status = 200
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "192.0.2.2:1"
	ctx, cancel := context.WithCancel(r.Context())
	cancel()
	hd.ServeHTTP(httptest.NewRecorder(), r.WithContext(ctx))
	// A panic keeps its charge.
	func() {
		defer func() { _ = recover() }()
		send(-1, "192.0.2.2:1")
	}()
	if c := send(401, "192.0.2.2:1"); c != 429 {
		t.Errorf("after a client gone and a panic: %d, want 429 (both charges kept)", c)
	}

	_, err := sluicehttp.New(sluicehttp.Config{Limits: []sluicehttp.Limit{{Name: "a", Rate: "2/m", CountStatus: []string{"4x"}}}})
	if err == nil || err.Error() != `sluicehttp: limits[0] (a): count_status "4x": must be a status code from 100 to 599 or a class from 1xx to 5xx` {
		t.Errorf("bad status: %v", err)
	}
}
