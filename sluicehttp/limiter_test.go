package sluicehttp_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/sluicehttp"
)

// tenantKey is the context key under which an earlier handler puts the
// tenant in these tests.
type tenantKey struct{}

// withTenant is a handler that puts the X-Tenant header in the request's
// context, as an authentication handler would.
func withTenant(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := r.Header.Get("X-Tenant"); t != "" {
			r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, t))
		}
		next.ServeHTTP(w, r)
	})
}

// TestKeyFunc: a limit keyed by a function of the request counts each
// tenant apart, exempts requests without one, and counts the same key as
// Take does.
func TestKeyFunc(t *testing.T) {
	lim := newMW(t, sluicehttp.Config{Limits: []sluicehttp.Limit{{
		Name: "tenant", Rate: "2/1h",
		KeyFunc: func(r *http.Request) (string, bool) {
			t, ok := r.Context().Value(tenantKey{}).(string)
			return t, ok
		},
	}}})
	h := withTenant(lim.Handler(ok))
	got := func(tenant string) int {
		if tenant == "" {
			return serve(h, "192.0.2.1:1").Code
		}
		return serve(h, "192.0.2.1:1", "X-Tenant: "+tenant).Code
	}
	var seq []int
	for _, tenant := range []string{"a", "a", "a", "b", "", "", ""} {
		seq = append(seq, got(tenant))
	}
	want := []int{200, 200, 429, 200, 200, 200, 200}
	for i := range want {
		if seq[i] != want[i] {
			t.Fatalf("statuses %v, want %v (per tenant; no tenant: exempt)", seq, want)
		}
	}
	d, err := lim.Take(context.Background(), "b", 1)
	if err != nil || !d.Allowed || d.Remaining >= 1 || d.Limit != "tenant" {
		t.Errorf("Take of tenant b after one request: %+v, %v; want allowed with less than 1 remaining", d, err)
	}
	if got("b") != 429 {
		t.Error("tenant b: a request after Take's charge was admitted")
	}
}

// TestLimited: Limited answers a rejection, with the headers already set
// and the decision at hand, and sees no admitted request.
func TestLimited(t *testing.T) {
	var calls int
	lim := newMW(t, sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "api", Rate: "1/1m"}},
		Limited: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls++
			d, ok := sluicehttp.DecisionOf(r)
			if !ok || d.Allowed || d.Limit != "api" || d.RetryAfter <= 59*time.Second || d.RetryAfter > time.Minute {
				t.Errorf("DecisionOf: %+v, %v; want api's rejection, retry after 1m", d, ok)
			}
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte("<p>slow down</p>"))
		}),
	})
	h := lim.Handler(ok)
	if w := serve(h, "192.0.2.1:1"); w.Code != 200 || calls != 0 {
		t.Fatalf("first request: %d, Limited called %d times", w.Code, calls)
	}
	w := serve(h, "192.0.2.1:1")
	if w.Code != http.StatusServiceUnavailable || w.Body.String() != "<p>slow down</p>" || calls != 1 {
		t.Fatalf("second request: %d %q, Limited called %d times; want Limited's answer", w.Code, w.Body.String(), calls)
	}
	if w.Header().Get("Retry-After") != "60" || w.Header().Get("RateLimit") == "" {
		t.Errorf("second request's headers %v; want Retry-After 60 and the rate-limit headers", w.Header())
	}
	if _, ok := sluicehttp.DecisionOf(httptestRequest()); ok {
		t.Error("DecisionOf of a request Limited is not answering: ok")
	}
}

func httptestRequest() *http.Request {
	r, _ := http.NewRequest("GET", "http://example.com/", nil)
	return r
}

// TestTakeAllowWait runs the limiter outside HTTP on memory and on Redis:
// Take charges and reports, Allow spends one unit, Wait waits for the
// quota and gives up at once when its context's deadline is too near.
func TestTakeAllowWait(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			cfg := sluicehttp.Config{Limits: []sluicehttp.Limit{
				{Name: "per_sec", Rate: "50/1s", Burst: 2},
				{Name: "per_hour", Rate: "6/1h", Algorithm: "fixed_window"},
			}}
			if store == "redis" {
				cfg.Redis = &sluicehttp.Redis{Addr: srv.Addr, Prefix: "taw:"}
			}
			lim := newMW(t, cfg)
			ctx := context.Background()
			d, err := lim.Take(ctx, "job-1", 2)
			if err != nil || !d.Allowed || d.Limit != "per_sec" || d.Remaining >= 1 || d.Delay != 0 {
				t.Fatalf("Take 2: %+v, %v; want allowed, per_sec closest with less than 1 left", d, err)
			}
			d, err = lim.Take(ctx, "job-1", 1)
			if err != nil || d.Allowed || d.Limit != "per_sec" || d.RetryAfter <= 0 || d.RetryAfter > 20*time.Millisecond {
				t.Fatalf("Take 1 more: %+v, %v; want per_sec's refusal, retry after at most 20ms", d, err)
			}
			if lim.Allow(ctx, "job-1") {
				t.Error("Allow on an empty bucket: true")
			}
			if !lim.Allow(ctx, "job-2") {
				t.Error("Allow of another key: false")
			}
			// Wait takes per_sec's quota as it refills: 4 more units
			// reach job-1's 6 of per_hour.
			for i := 0; i < 4; i++ {
				if err := lim.Wait(ctx, "job-1", 1); err != nil {
					t.Fatalf("Wait %d: %v", i+1, err)
				}
			}
			short, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			start := time.Now()
			err = lim.Wait(short, "job-1", 1)
			if err == nil || !strings.Contains(err.Error(), "deadline") {
				t.Errorf("Wait past per_hour's quota: %v; want the deadline error", err)
			}
			if time.Since(start) > 500*time.Millisecond {
				t.Errorf("Wait past the deadline took %v; want an error at once", time.Since(start))
			}
			if err := lim.Wait(ctx, "job-3", 51); err == nil || !strings.Contains(err.Error(), "capacity") {
				t.Errorf("Wait of a cost above the capacity: %v", err)
			}
			if _, err := lim.Take(ctx, "", 1); err == nil {
				t.Error("Take of an empty key: no error")
			}
			if _, err := lim.Take(ctx, "job-1", 0); err == nil {
				t.Error("Take of cost 0: no error")
			}
		})
	}
}

// TestTakeRaceForLastTokens: 40 goroutines race Take for a quota of 10
// on Redis and on memory; exactly 10 are admitted.
func TestTakeRaceForLastTokens(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	for _, store := range []string{"memory", "redis"} {
		cfg := sluicehttp.Config{Limits: []sluicehttp.Limit{{Name: "q", Rate: "10/1h", Algorithm: "sliding_window_log"}}}
		if store == "redis" {
			cfg.Redis = &sluicehttp.Redis{Addr: srv.Addr, Prefix: "race:", Timeout: 5 * time.Second}
		}
		lim := newMW(t, cfg)
		var admitted int32
		var wg sync.WaitGroup
		for i := 0; i < 40; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if d, err := lim.Take(context.Background(), "k", 1); err == nil && d.Allowed {
					atomic.AddInt32(&admitted, 1)
				}
			}()
		}
		wg.Wait()
		if admitted != 10 {
			t.Errorf("%s: %d of 40 admitted, want 10", store, admitted)
		}
	}
}

// TestTakeStoreError: while Redis is down, Take returns the failure
// policy's decision with Redis's error.
func TestTakeStoreError(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	srv.Stop()
	for _, policy := range []string{"allow", "deny"} {
		lim := newMW(t, sluicehttp.Config{
			Limits:       []sluicehttp.Limit{{Name: "api", Rate: "1/1h"}},
			Redis:        &sluicehttp.Redis{Addr: srv.Addr, Timeout: 100 * time.Millisecond},
			OnStoreError: policy,
		})
		d, err := lim.Take(context.Background(), "k", 1)
		if err == nil || d.Allowed != (policy == "allow") {
			t.Errorf("%s, Redis down: %+v, %v; want the policy's decision and an error", policy, d, err)
		}
	}
}

// TestTakeInFlight: in-flight limits need a request, so Take refuses.
func TestTakeInFlight(t *testing.T) {
	lim := newMW(t, sluicehttp.Config{Limits: []sluicehttp.Limit{{Name: "conc", MaxInFlight: 2}}})
	if _, err := lim.Take(context.Background(), "k", 1); !errors.Is(err, sluicehttp.ErrInFlight) {
		t.Errorf("Take with a MaxInFlight limit: %v, want ErrInFlight", err)
	}
}
