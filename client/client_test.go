package client

import (
	"context"
	"math"
	"math/rand"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/traefikplugin"
)

// limitedServer is a real sluice-limited server: the Traefik plugin's
// middleware, compiled, in front of a handler that counts what reaches it.
func limitedServer(t *testing.T, name string, cfg *traefikplugin.Config) (*httptest.Server, *int64) {
	t.Helper()
	var served int64
	next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { atomic.AddInt64(&served, 1) })
	h, err := traefikplugin.New(context.Background(), next, cfg, name)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, &served
}

// lockedRand is a seeded source safe for concurrent use.
func lockedRand(seed int64) func() float64 {
	var mu sync.Mutex
	r := rand.New(rand.NewSource(seed))
	return func() float64 {
		mu.Lock()
		defer mu.Unlock()
		return r.Float64()
	}
}

// TestClientsShareAQuota: N clients sharing one quota, each sending its
// requests as fast as it may, all finish without a failed request, and
// the waits of clients rejected together are spread, not synchronized.
func TestClientsShareAQuota(t *testing.T) {
	const clients, each = 6, 5 // 30 requests at 10 per second, burst 10
	srv, served := limitedServer(t, "share-"+strconv.FormatInt(time.Now().UnixNano(), 36)+"@test", &traefikplugin.Config{Average: "10", Burst: "10"})
	var mu sync.Mutex
	var waits []time.Duration
	tr := &Transport{MaxAttempts: 20, Rand: lockedRand(1), OnRetry: func(_ int, resp *http.Response, wait time.Duration) {
		if resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "1" {
			t.Errorf("retry after %v, Retry-After %q", resp, resp.Header.Get("Retry-After"))
		}
		mu.Lock()
		waits = append(waits, wait)
		mu.Unlock()
	}}
	c := &http.Client{Transport: tr}
	var failed int64
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < each; j++ {
				resp, err := c.Get(srv.URL)
				if err != nil || resp.StatusCode != http.StatusOK {
					atomic.AddInt64(&failed, 1)
				}
				if resp != nil {
					resp.Body.Close()
				}
			}
		}()
	}
	wg.Wait()
	if failed != 0 || *served != clients*each {
		t.Fatalf("%d failed requests, %d served; want 0 and %d", failed, *served, clients*each)
	}
	if len(waits) == 0 {
		t.Fatal("no request was retried: the quota was never reached")
	}
	// Every wait honours Retry-After (1 s) and adds up to 50 % jitter:
	// spread over [1 s, 1.5 s), not all at the same instant.
	mean, sd := stats(waits)
	for _, w := range waits {
		if w < time.Second || w >= 1500*time.Millisecond {
			t.Errorf("wait %v outside [1s, 1.5s)", w)
		}
	}
	if sd < 0.05 {
		t.Errorf("%d retries wait %.3f s ± %.3f s: synchronized", len(waits), mean, sd)
	}
	t.Logf("%d requests, %d retries; retry waits %.3f s ± %.3f s (min %v, max %v)", clients*each, len(waits), mean, sd, minOf(waits), maxOf(waits))
}

func stats(ds []time.Duration) (mean, sd float64) {
	for _, d := range ds {
		mean += d.Seconds()
	}
	mean /= float64(len(ds))
	for _, d := range ds {
		sd += (d.Seconds() - mean) * (d.Seconds() - mean)
	}
	return mean, math.Sqrt(sd / float64(len(ds)))
}

func minOf(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		if d < m {
			m = d
		}
	}
	return m
}

func maxOf(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds {
		if d > m {
			m = d
		}
	}
	return m
}

// countingServer answers status to every request and counts them.
func countingServer(t *testing.T, status int, header ...string) (*httptest.Server, *int64) {
	t.Helper()
	var n int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt64(&n, 1)
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func TestNeverRetries(t *testing.T) {
	c := &http.Client{Transport: &Transport{BaseDelay: time.Millisecond}}
	// A 400 is the client's own mistake: never retried.
	srv, n := countingServer(t, http.StatusBadRequest)
	if resp, err := c.Get(srv.URL); err != nil || resp.StatusCode != 400 || *n != 1 {
		t.Errorf("400: %v %v after %d attempts, want one", resp, err, *n)
	}
	// A POST without an Idempotency-Key is never sent twice.
	srv, n = countingServer(t, http.StatusTooManyRequests, "Retry-After", "0")
	if resp, err := c.Post(srv.URL, "text/plain", strings.NewReader("x")); err != nil || resp.StatusCode != 429 || *n != 1 {
		t.Errorf("POST: %v %v after %d attempts, want one", resp, err, *n)
	}
}

func TestRetriesIdempotentPostRebuildingBody(t *testing.T) {
	var bodies []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b := make([]byte, 16)
		k, _ := r.Body.Read(b)
		mu.Lock()
		bodies = append(bodies, string(b[:k]))
		first := len(bodies) == 1
		mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "0")
			w.WriteHeader(http.StatusTooManyRequests)
		}
	}))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("payload"))
	req.Header.Set("Idempotency-Key", "k1")
	resp, err := (&http.Client{Transport: &Transport{}}).Do(req)
	if err != nil || resp.StatusCode != 200 || len(bodies) != 2 || bodies[1] != "payload" {
		t.Errorf("got %v %v, bodies %q; want a second attempt with the same body", resp, err, bodies)
	}
}

func TestGivesUp(t *testing.T) {
	srv, n := countingServer(t, http.StatusServiceUnavailable)
	c := &http.Client{Transport: &Transport{MaxAttempts: 3, BaseDelay: time.Millisecond}}
	if resp, err := c.Get(srv.URL); err != nil || resp.StatusCode != 503 || *n != 3 {
		t.Errorf("503: %v %v after %d attempts, want 503 after 3", resp, err, *n)
	}
	// A Retry-After beyond the deadline is not waited out, nor one beyond
	// MaxDelay.
	srv, n = countingServer(t, http.StatusTooManyRequests, "Retry-After", "3600")
	if resp, err := c.Get(srv.URL); err != nil || resp.StatusCode != 429 || *n != 1 {
		t.Errorf("Retry-After past MaxDelay: %v %v after %d attempts", resp, err, *n)
	}
	srv, n = countingServer(t, http.StatusTooManyRequests, "Retry-After", "20")
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	if resp, err := c.Do(req); err != nil || resp.StatusCode != 429 || *n != 1 {
		t.Errorf("Retry-After past the deadline: %v %v after %d attempts", resp, err, *n)
	}
}

func TestServerWait(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		h    http.Header
		want time.Duration
		ok   bool
	}{
		{http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		{http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second, true},
		{http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0, true},
		{http.Header{"Ratelimit": {`"api";r=0;t=12`}}, 12 * time.Second, true},
		{http.Header{"Retry-After": {"soon"}}, 0, false},
		{http.Header{}, 0, false},
	} {
		if got, ok := serverWait(c.h, now); got != c.want || ok != c.ok {
			t.Errorf("%v: %v %v, want %v %v", c.h, got, ok, c.want, c.ok)
		}
	}
	got := rateLimitItems(`"api";r=42;t=17, "other";r=1;t=2, "x";r=1`, 4)
	if len(got) != 2 || got[0] != (rateLimitItem{`"api"`, 42, 17}) || got[1] != (rateLimitItem{`"other"`, 1, 2}) {
		t.Errorf("rateLimitItems: %+v", got)
	}
}

// TestPacingAvoids429: a paced client spreads its requests by the
// RateLimit field and, sharing nothing with others, never sees a 429.
func TestPacingAvoids429(t *testing.T) {
	srv, served := limitedServer(t, "pace-"+strconv.FormatInt(time.Now().UnixNano(), 36)+"@test", &traefikplugin.Config{Average: "20", Burst: "5"})
	var rejected int64
	tr := &Transport{Pace: true, OnRetry: func(int, *http.Response, time.Duration) { atomic.AddInt64(&rejected, 1) }}
	c := &http.Client{Transport: tr}
	for i := 0; i < 15; i++ {
		resp, err := c.Get(srv.URL)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("request %d: %v %v", i, resp, err)
		}
		resp.Body.Close()
	}
	if rejected != 0 || *served != 15 {
		t.Errorf("%d rejections, %d served; want none and 15", rejected, *served)
	}
}
