package core

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// costGate is a gate on s of a token_bucket of 10 an hour, burst 10, that
// takes its cost from the response header X-Cost (or, with bytes, from
// the bytes of the response's body) and counts statuses but 404.
func costGate(t *testing.T, s model.Store, clock model.Clock, bytes bool) (*Gate, *model.Limit) {
	t.Helper()
	l := coretest.Limit(t, "tokens", model.TokenBucket, "10/h", 10, 0)
	l.CountStatus = model.StatusSet{1, 2, 3, 5}
	if bytes {
		l.CostBytes = true
	} else {
		l.CostHeader = "X-Cost"
	}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: s, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return g, l
}

// costed decides a request of key with the estimate cost and, when
// admitted, answers it with status and X-Cost: value (none when empty)
// on ctx; it reports whether it was admitted.
func costed(g *Gate, l *model.Limit, ctx context.Context, key string, cost float64, status int, value string) bool {
	asks := []model.Ask{{Limit: l, Key: key, Cost: cost}}
	v := g.Decide(context.Background(), asks)
	if v.Outcome != OutcomeAllowed {
		return false
	}
	h := http.Header{}
	if value != "" {
		h.Set("X-Cost", value)
	}
	g.Answered(ctx, asks, &v, status, h, 0)
	return true
}

// remaining is what key has left, read by a request of cost 0 (which
// charges nothing), and its RetryAfter.
func remaining(t *testing.T, g *Gate, l *model.Limit, key string) (float64, time.Duration) {
	t.Helper()
	v := g.Decide(context.Background(), []model.Ask{{Limit: l, Key: key, Cost: 0}})
	return v.Decision.Remaining, v.Decision.RetryAfter
}

// checkSettled: the response's X-Cost is charged, the estimate settled
// to it; a hostile or missing value leaves the estimate; a value above
// the capacity counts as the capacity; an uncounted status gives the
// estimate back; a request cut short keeps it, and is charged a
// response cost above it when its client left; a debt
// refuses even a cost of 0 until the rate repays it.
func checkSettled(t *testing.T, g *Gate, l *model.Limit, key string, clock *testclock.Clock) {
	t.Helper()
	step := func(label string, cost float64, status int, value string, want float64) {
		t.Helper()
		if !costed(g, l, context.Background(), key, cost, status, value) {
			t.Fatalf("%s: refused", label)
		}
		if rem, _ := remaining(t, g, l, key); rem < want-1e-3 || rem > want+1e-3 {
			t.Fatalf("%s: %v remaining, want %v", label, rem, want)
		}
	}
	step("estimate 0, X-Cost 3", 0, 200, "3", 7)
	step("estimate 2, X-Cost 1", 2, 200, " 1 ", 6)
	want := 6.0
	for _, hostile := range []string{"-5", "NaN", "Inf", "0x10", "12abc", ""} {
		want -= 0.5
		step("estimate 0.5, X-Cost "+strconv.Quote(hostile), 0.5, 200, hostile, want)
	}
	step("estimate 1, 404 not counted", 1, 404, "3", 3)
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	if !costed(g, l, ended, key, 1, 200, "3") {
		t.Fatal("cut short: refused")
	}
	if rem, _ := remaining(t, g, l, key); rem < 0-1e-3 || rem > 0+1e-3 {
		t.Fatalf("client left after X-Cost 3: %v remaining, want 0 (the response's cost, above the estimate)", rem)
	}
	clock.Advance(6 * time.Minute) // a token back
	if !costed(g, l, ended, key, 0.5, 200, "0") {
		t.Fatal("cut short: refused")
	}
	if rem, _ := remaining(t, g, l, key); rem < 0.5-1e-3 || rem > 0.5+1e-3 {
		t.Fatalf("client left after X-Cost 0: %v remaining, want 0.5 (the estimate kept)", rem)
	}
	clock.Advance(9 * time.Minute)                       // 1.5 tokens back
	step("estimate 0, X-Cost 1e308", 0, 200, "1e308", 0) // the capacity: 8 in debt
	rem, retry := remaining(t, g, l, key)
	if rem != 0 || retry < 47*time.Minute || retry > 48*time.Minute+time.Second {
		t.Fatalf("8 in debt at 10/h: %v remaining, RetryAfter %v; want 0 and 48 min", rem, retry)
	}
	if costed(g, l, context.Background(), key, 0, 200, "1") {
		t.Fatal("in debt: a request of cost 0 admitted")
	}
	clock.Advance(retry)
	if !costed(g, l, context.Background(), key, 0, 200, "1") {
		t.Fatal("debt repaid: refused")
	}
}

func TestAnsweredCostMemory(t *testing.T) {
	s, clock := memStore(t, 0)
	g, l := costGate(t, s, clock.Now, false)
	checkSettled(t, g, l, "k", clock)
}

func TestAnsweredCostRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	clock := testclock.New(testclock.Epoch)
	g, l := costGate(t, newClockedRedisStore(t, resptest.Client(t, srv.Addr, 4), clock), clock.Now, false)
	checkSettled(t, g, l, coretest.Nonce+"/settled", clock)
}

// TestServeAnsweredBytes: through ServeAnswered, a limit with CostBytes
// is charged the bytes the handler wrote, and a debt is answered 429 with
// a Retry-After until the rate repays it.
func TestServeAnsweredBytes(t *testing.T) {
	s, clock := memStore(t, 0)
	g, l := costGate(t, s, clock.Now, true)
	body := "123456"
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(body[:3]))
		w.Write([]byte(body[3:]))
	})
	serve := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest("GET", "/", nil)
		asks := []model.Ask{{Limit: l, Key: "k", Cost: 0}}
		if v, ok := g.Serve(w, r, asks); ok {
			g.ServeAnswered(next, w, r, asks, &v)
		}
		return w
	}
	serve()
	if rem, _ := remaining(t, g, l, "k"); rem != 4 {
		t.Fatalf("6 bytes written: %v remaining, want 4", rem)
	}
	serve() // 2 in debt: 12 minutes at 10/h
	w := serve()
	if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "720" {
		t.Fatalf("in debt: %d, Retry-After %q; want 429 and 720", w.Code, w.Header().Get("Retry-After"))
	}
}

// serveCosted serves a request of key, estimated at cost, through g and,
// admitted, to next through ServeAnswered or, with lane, through the
// Traefik lane's answeredNext; it returns the request's writer, a
// compiled one under Yaegi too.
func serveCosted(t *testing.T, g *Gate, l *model.Limit, key string, cost float64, next http.Handler, lane bool) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/", nil)
	asks := []model.Ask{{Limit: l, Key: key, Cost: cost}}
	v, ok := g.Serve(w, r, asks)
	if !ok {
		t.Fatalf("%s: refused", key)
	}
	if lane {
		(&answeredNext{gate: g, next: next, asks: asks, v: &v, aborts: l.CostFromResponse()}).ServeHTTP(w, r)
	} else {
		g.ServeAnswered(next, w, r, asks, &v)
	}
	return w
}

// TestServeAnsweredTrailer: a cost header that comes as a trailer, as a
// stream states what it cost at its end, is charged: announced (in the
// header after the response, as net/http/httputil.ReverseProxy and Caddy
// copy announced trailers) or not (under http.TrailerPrefix).
func TestServeAnsweredTrailer(t *testing.T) {
	s, clock := memStore(t, 0)
	g, l := costGate(t, s, clock.Now, false)
	for _, tc := range []struct {
		name  string
		write func(http.Header)
		want  float64
	}{
		{"announced", func(h http.Header) { h.Set("X-Cost", "3") }, 7},
		{"unannounced", func(h http.Header) { h.Set(http.TrailerPrefix+"X-Cost", "2") }, 5},
	} {
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tc.name == "announced" {
				w.Header().Set("Trailer", "X-Cost")
			}
			w.Write([]byte("data: 1\n\n"))
			tc.write(w.Header())
		})
		serveCosted(t, g, l, "k", 0, next, false)
		if rem, _ := remaining(t, g, l, "k"); rem != tc.want {
			t.Fatalf("%s trailer: %v remaining, want %v", tc.name, rem, tc.want)
		}
	}
}

// TestServeAnsweredAborted: a handler that panics once its response
// began, as a proxy aborts a response whose client left
// (http.ErrAbortHandler), is charged the response's cost above the
// estimate and never given back below it; one that panics before its
// response began keeps the estimate. The panic goes on. The same through
// ServeAnswered and the Traefik lane's writer.
func TestServeAnsweredAborted(t *testing.T) {
	s, clock := memStore(t, 0)
	g, l := costGate(t, s, clock.Now, false)
	for _, tc := range []struct {
		name string
		lane bool
		cost string // X-Cost; "" panics before the response
		want float64
	}{
		{"aborted, X-Cost 3 above the estimate 1", false, "3", 7},
		{"aborted, X-Cost 0.5 below the estimate 1", false, "0.5", 6},
		{"panicked before the response", false, "", 5},
		{"lane: aborted, X-Cost 3 above the estimate 1", true, "3", 2},
		{"lane: aborted, X-Cost 0.5 below the estimate 1", true, "0.5", 1},
		{"lane: panicked before the response", true, "", 0},
	} {
		tc := tc
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tc.cost != "" {
				w.Header().Set("X-Cost", tc.cost)
				w.Write([]byte("data: 1\n\n"))
			}
			panic(http.ErrAbortHandler)
		})
		func() {
			defer func() {
				// Yaegi wraps a panic that crosses interpreted frames:
				// compare its text.
				if p := recover(); p == nil || !strings.Contains(fmt.Sprint(p), http.ErrAbortHandler.Error()) {
					t.Fatalf("%s: recovered %v, want http.ErrAbortHandler", tc.name, p)
				}
			}()
			serveCosted(t, g, l, "k", 1, next, tc.lane)
		}()
		if rem, _ := remaining(t, g, l, "k"); rem != tc.want {
			t.Fatalf("%s: %v remaining, want %v", tc.name, rem, tc.want)
		}
	}
}

// TestAnsweredFlushesStreams: the lane's writer (flushStreams) flushes a
// stream, as httputil.ReverseProxy tells one (no Content-Length, or
// server-sent events), at its header and at each write, since its
// handlers cannot flush it under Traefik's interpreter; it leaves another
// response to the writer's buffers. ServeAnswered's writer flushes only
// when asked to.
func TestAnsweredFlushesStreams(t *testing.T) {
	s, clock := memStore(t, 0)
	g, l := costGate(t, s, clock.Now, true)
	for _, tc := range []struct {
		name        string
		contentType string
		length      bool // a Content-Length
		header      bool // only WriteHeader, no body
		lane        bool
		wantFlushed bool
	}{
		{"lane, events", "text/event-stream", false, false, true, true},
		{"lane, events with a Content-Length", "text/event-stream", true, false, true, true},
		{"lane, chunked", "text/plain", false, false, true, true},
		{"lane, a stream's header", "text/plain", false, true, true, true},
		{"lane, Content-Length", "text/plain", true, false, true, false},
		{"ServeAnswered, events", "text/event-stream", false, false, false, false},
	} {
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", tc.contentType)
			if tc.length {
				w.Header().Set("Content-Length", "9")
			}
			if tc.header {
				w.WriteHeader(http.StatusOK)
				return
			}
			w.Write([]byte("data: 1\n\n"))
		})
		w := serveCosted(t, g, l, tc.name, 0, next, tc.lane)
		if w.Flushed != tc.wantFlushed {
			t.Errorf("%s: flushed %v, want %v", tc.name, w.Flushed, tc.wantFlushed)
		}
		want := 1.0 // 9 bytes of 10
		if tc.header {
			want = 10
		}
		if rem, _ := remaining(t, g, l, tc.name); rem != want {
			t.Errorf("%s: %v remaining, want %v", tc.name, rem, want)
		}
	}
}

// raceSettled races 32 goroutines, 10 requests each, for a fresh key's
// capacity of 10, each request estimated at 1 and answered X-Cost: 2.
// Admissions are decided on estimates, so between 5 and 10 are admitted
// whatever the interleaving; afterwards the store holds exactly two for
// each, none lost: the debt beyond the capacity, if any, is refused for
// as long as the rate needs to repay it.
func raceSettled(t *testing.T, g *Gate, l *model.Limit, key string) {
	t.Helper()
	var wg sync.WaitGroup
	var admitted int64
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				if costed(g, l, context.Background(), key, 1, 200, "2") {
					atomic.AddInt64(&admitted, 1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted < 5 || admitted > 10 {
		t.Fatalf("%d admitted, want 5 to 10", admitted)
	}
	rem, retry := remaining(t, g, l, key)
	charged := 10 - rem
	if rem == 0 {
		charged = 10 + retry.Minutes()/6 // 6 minutes a unit at 10/h
	}
	if want := float64(2 * admitted); charged < want-0.01 || charged > want+0.01 {
		t.Fatalf("%d admitted at 2 each: %v charged (remaining %v, RetryAfter %v), want %v", admitted, charged, rem, retry, want)
	}
}

func TestAnsweredCostRaceMemory(t *testing.T) {
	s, clock := memStore(t, 0)
	g, l := costGate(t, s, clock.Now, false)
	raceSettled(t, g, l, "k")
}

func TestAnsweredCostRaceRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	clock := testclock.New(testclock.Epoch)
	g, l := costGate(t, newClockedRedisStore(t, resptest.Client(t, srv.Addr, 4), clock), clock.Now, false)
	raceSettled(t, g, l, coretest.Nonce+"/race")
}

// TestAnsweredCostFallback: an admission that the local fallback charged
// is settled there, on its share of the limit.
func TestAnsweredCostFallback(t *testing.T) {
	local, clock := memStore(t, 0)
	l := coretest.Limit(t, "tokens", model.TokenBucket, "10/h", 10, 0)
	l.CostHeader = "X-Cost"
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: &failingStore{}, Fallback: local, Instances: 1, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if !costed(g, l, context.Background(), "k", 0, 200, "4") {
		t.Fatal("refused")
	}
	if rem, _ := remaining(t, g, l, "k"); rem != 6 {
		t.Fatalf("X-Cost 4 on the fallback: %v remaining, want 6", rem)
	}
}
