// Package client is an http.RoundTripper for clients of rate-limited
// servers that never causes a retry storm: on 429 Too Many Requests and
// 503 Service Unavailable it waits as the server says (Retry-After, in
// seconds or as an HTTP date, or else the t of the IETF RateLimit field),
// spread by jitter so that clients rejected together do not come back
// together; on other failures it backs off exponentially with full jitter;
// it caps the attempts and never waits past the request's deadline; it
// retries only requests that are safe to repeat (idempotent methods, or
// any request with an Idempotency-Key header), rebuilding bodies through
// Request.GetBody; it never retries any other 4xx. With Pace set, it also
// slows down on its own as the RateLimit field's remaining quota runs low,
// so that a well-behaved client need not see a 429 at all.
//
// It uses the standard library only.
package client

import (
	"context"
	"io"
	"math"
	"math/rand"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults of Transport's zero fields.
const (
	DefaultMaxAttempts = 5
	DefaultBaseDelay   = 100 * time.Millisecond
	DefaultMaxDelay    = 30 * time.Second
	DefaultJitter      = 0.5
)

// Transport retries requests as the package documentation says. Its zero
// value is ready to use; it is safe for concurrent use, and its fields
// must not change once it is in use.
type Transport struct {
	// Base sends each attempt; nil means http.DefaultTransport.
	Base http.RoundTripper
	// MaxAttempts is the most attempts per request, the first included;
	// zero means DefaultMaxAttempts.
	MaxAttempts int
	// BaseDelay and MaxDelay shape the backoff when the server names no
	// wait: attempt n waits a random time in [0, min(MaxDelay,
	// BaseDelay·2^n)). A response that asks for a longer wait than
	// MaxDelay is returned instead of retried.
	BaseDelay, MaxDelay time.Duration
	// Jitter lengthens a wait the server asked for by a random fraction of
	// itself, up to Jitter (0.5: by 0 to 50 %). Zero means DefaultJitter;
	// a negative value waits exactly.
	Jitter float64
	// Pace, when set, delays a request while the last RateLimit field
	// seen said little quota remained: by the time until the limit resets,
	// divided among the remaining units.
	Pace bool
	// Rand returns numbers in [0, 1); nil means math/rand. It must be
	// safe for concurrent use.
	Rand func() float64
	// OnRetry, if set, is told of every retry before its wait: the attempt
	// that failed (1 for the first), its response (nil after a transport
	// error) and the wait.
	OnRetry func(attempt int, resp *http.Response, wait time.Duration)

	// now and sleep, when set, replace time.Now and a timer (for tests).
	now   func() time.Time
	sleep func(ctx context.Context, d time.Duration) error

	mu     sync.Mutex
	paceAt time.Time // no request before this instant, when pacing
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	retryable := repeatable(req)
	max := t.MaxAttempts
	if max <= 0 {
		max = DefaultMaxAttempts
	}
	for attempt := 1; ; attempt++ {
		if t.Pace {
			if err := t.wait(ctx, t.paceWait()); err != nil {
				return nil, err
			}
		}
		try := req
		if attempt > 1 {
			var err error
			if try, err = rewind(req); err != nil {
				return nil, err
			}
		}
		resp, err := t.base().RoundTrip(try)
		if err == nil {
			t.observe(resp)
		}
		var wait time.Duration
		switch {
		case err != nil:
			if !retryable || attempt == max || ctx.Err() != nil {
				return nil, err
			}
			wait = t.backoff(attempt)
		case resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable:
			if !retryable || attempt == max {
				return resp, nil
			}
			if asked, ok := serverWait(resp.Header, t.clock()); ok {
				if asked > t.maxDelay() {
					return resp, nil // longer than this client waits
				}
				wait = t.jittered(asked)
			} else {
				wait = t.backoff(attempt)
			}
		default:
			return resp, nil // success, or an error retrying cannot fix
		}
		if d, ok := ctx.Deadline(); ok && d.Sub(t.clock()) < wait {
			// The wait would outlast the caller: answer now.
			if resp != nil {
				return resp, nil
			}
			return nil, err
		}
		if t.OnRetry != nil {
			t.OnRetry(attempt, resp, wait)
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		if err := t.wait(ctx, wait); err != nil {
			return nil, err
		}
	}
}

func (t *Transport) base() http.RoundTripper {
	if t.Base != nil {
		return t.Base
	}
	return http.DefaultTransport
}

func (t *Transport) clock() time.Time {
	if t.now != nil {
		return t.now()
	}
	return time.Now()
}

// wait sleeps for d unless ctx ends first.
func (t *Transport) wait(ctx context.Context, d time.Duration) error {
	if t.sleep != nil {
		return t.sleep(ctx, d)
	}
	return sleep(ctx, d)
}

func (t *Transport) random() float64 {
	if t.Rand != nil {
		return t.Rand()
	}
	return rand.Float64()
}

// backoff is the wait after failed attempt n (1 for the first): full
// jitter over [0, min(MaxDelay, BaseDelay·2^n)).
func (t *Transport) backoff(n int) time.Duration {
	base := t.BaseDelay
	if base <= 0 {
		base = DefaultBaseDelay
	}
	ceiling := math.Min(float64(base)*math.Pow(2, float64(n)), float64(t.maxDelay()))
	return time.Duration(t.random() * ceiling)
}

func (t *Transport) maxDelay() time.Duration {
	if t.MaxDelay > 0 {
		return t.MaxDelay
	}
	return DefaultMaxDelay
}

// jittered lengthens a wait the server asked for by up to Jitter of itself.
func (t *Transport) jittered(d time.Duration) time.Duration {
	j := t.Jitter
	if j == 0 {
		j = DefaultJitter
	}
	if j > 0 {
		d += time.Duration(t.random() * j * float64(d))
	}
	return d
}

// observe records, when pacing, how long to hold the next request after
// resp's RateLimit field: with r units left and the limit whole again in
// t seconds, t/(r+1), from now.
func (t *Transport) observe(resp *http.Response) {
	if !t.Pace {
		return
	}
	r, secs, ok := rateLimitField(resp.Header.Get("RateLimit"))
	if !ok {
		return
	}
	gap := time.Duration(float64(secs) * float64(time.Second) / float64(r+1))
	t.mu.Lock()
	if at := t.clock().Add(gap); at.After(t.paceAt) {
		t.paceAt = at
	}
	t.mu.Unlock()
}

// paceWait is how long the next request must wait, when pacing.
func (t *Transport) paceWait() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.paceAt.Sub(t.clock())
}

// repeatable reports whether req may be sent again: an idempotent method
// or an Idempotency-Key, and a body that can be rebuilt.
func repeatable(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
	default:
		if req.Header.Get("Idempotency-Key") == "" {
			return false
		}
	}
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// rewind returns a copy of req with a fresh body, for another attempt.
func rewind(req *http.Request) (*http.Request, error) {
	r := req.Clone(req.Context())
	if req.Body != nil && req.Body != http.NoBody {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	return r, nil
}

// serverWait is the wait a response asks for: Retry-After in seconds or as
// an HTTP date (relative to now), or else the t of the RateLimit field.
func serverWait(h http.Header, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if secs, err := strconv.ParseInt(v, 10, 64); err == nil && secs >= 0 && secs < 1<<31 {
			return time.Duration(secs) * time.Second, true
		}
		if at, err := http.ParseTime(v); err == nil {
			if d := at.Sub(now); d > 0 {
				return d, true
			}
			return 0, true
		}
	}
	if _, secs, ok := rateLimitField(h.Get("RateLimit")); ok {
		return time.Duration(secs) * time.Second, true
	}
	return 0, false
}

// rateLimitField reads the remaining units r and the seconds t of the
// first item of an IETF RateLimit field, such as `"api";r=42;t=17`.
func rateLimitField(v string) (r, t int64, ok bool) {
	if v == "" {
		return 0, 0, false
	}
	item, _, _ := strings.Cut(v, ",")
	haveR, haveT := false, false
	for _, p := range strings.Split(item, ";")[1:] {
		k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil || n < 0 {
			continue
		}
		switch k {
		case "r":
			r, haveR = n, true
		case "t":
			t, haveT = n, true
		}
	}
	return r, t, haveR && haveT
}

// sleep waits for d unless ctx ends first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ http.RoundTripper = (*Transport)(nil)
