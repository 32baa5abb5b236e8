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
// spreads the requests to each origin by the RateLimit field of that
// origin's responses, so that a well-behaved client need not see a 429 at
// all.
//
// It uses the standard library only.
package client

import (
	"context"
	"io"
	"math"
	"math/rand"
	"net"
	"net/http"
	"net/url"
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

// Bounds of the pacing state, which hostile servers must not grow.
const (
	maxPaceOrigins  = 1024 // origins paced at once
	maxPacePolicies = 4    // policies paced per origin
	maxPolicyName   = 64   // bytes of a policy's name kept
	maxOriginLen    = 300  // longer origins (no DNS name is) are not paced
)

// maxFieldSeconds bounds the t of a RateLimit field, as Retry-After is
// bounded, so that it converts to a time.Duration without overflow.
const maxFieldSeconds = 1<<31 - 1

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
	// itself, up to Jitter (0.5: by 0 to 50 %), and never past MaxDelay.
	// Zero means DefaultJitter; a negative value waits exactly.
	Jitter float64
	// Pace, when set, spreads the requests to each origin (scheme, host
	// and port) by the RateLimit fields of its responses: for each policy
	// the field names, the next request to that origin waits t/(r+1)
	// after the latest response naming it (r units left, the limit whole
	// again in t seconds), at most MaxDelay. A pause that would outlast
	// the request's deadline is skipped: the request is sent at once. A
	// 429 or 503 sets no pause, as its retry waits what it asks for, or
	// the caller receives it. The Transport paces at most 1024 origins
	// and 4 policies per origin at once; when more arrive, the pauses
	// that end first are forgotten.
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

	mu   sync.Mutex
	pace map[string][]policyPause // by origin, when pacing
}

// policyPause is the instant before which one policy of an origin holds
// the next request.
type policyPause struct {
	policy string
	until  time.Time
}

// RoundTrip implements http.RoundTripper.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	retryable := repeatable(req)
	max := t.MaxAttempts
	if max <= 0 {
		max = DefaultMaxAttempts
	}
	var from string // the origin paced, when pacing
	if t.Pace {
		from = origin(req.URL)
	}
	for attempt := 1; ; attempt++ {
		if t.Pace {
			if wait := t.paceWait(from); wait > 0 && !t.outlasts(ctx, wait) {
				if err := t.wait(ctx, wait); err != nil {
					return nil, err
				}
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
			t.observe(from, resp.Header)
			return resp, nil // success, or an error retrying cannot fix
		}
		if t.outlasts(ctx, wait) {
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

// outlasts reports whether a wait of d would reach ctx's deadline.
func (t *Transport) outlasts(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && dl.Sub(t.clock()) <= d
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

// jittered lengthens a wait the server asked for, d ≤ MaxDelay, by up to
// Jitter of itself, up to MaxDelay.
func (t *Transport) jittered(d time.Duration) time.Duration {
	j := t.Jitter
	if j == 0 {
		j = DefaultJitter
	}
	if j > 0 {
		d += time.Duration(t.random() * j * float64(d))
	}
	if d > t.maxDelay() {
		d = t.maxDelay()
	}
	return d
}

// observe records, when pacing, the pauses that the RateLimit field of a
// response from origin sets: for each policy it names, with r units left
// and the limit whole again in t seconds, t/(r+1) from now, at most
// MaxDelay. A policy's latest field replaces its earlier pause.
func (t *Transport) observe(origin string, h http.Header) {
	if !t.Pace || len(origin) > maxOriginLen {
		return
	}
	items := rateLimitItems(h.Get("RateLimit"), maxPacePolicies)
	if len(items) == 0 {
		return
	}
	now := t.clock()
	t.mu.Lock()
	defer t.mu.Unlock()
	pauses, known := t.pace[origin]
	for _, it := range items {
		gap := t.maxDelay()
		if secs := float64(it.t) / (float64(it.r) + 1); secs < gap.Seconds() {
			gap = time.Duration(secs * float64(time.Second))
		}
		pauses = setPause(pauses, it.policy, now.Add(gap))
	}
	if !known {
		if t.pace == nil {
			t.pace = make(map[string][]policyPause)
		}
		if len(t.pace) >= maxPaceOrigins {
			t.makeRoom(now)
		}
	}
	t.pace[origin] = pauses
}

// setPause sets policy's pause in pauses to until: in its place, else in
// a new place while there are fewer than maxPacePolicies, else in that
// of the pause that ends first.
func setPause(pauses []policyPause, policy string, until time.Time) []policyPause {
	first := -1
	for i, p := range pauses {
		if p.policy == policy {
			pauses[i].until = until
			return pauses
		}
		if first < 0 || p.until.Before(pauses[first].until) {
			first = i
		}
	}
	if len(pauses) < maxPacePolicies {
		// A copy, so that the pause does not keep the whole header alive.
		return append(pauses, policyPause{strings.Clone(policy), until})
	}
	pauses[first] = policyPause{strings.Clone(policy), until}
	return pauses
}

// makeRoom makes room for one more origin: it forgets the origins whose
// pauses have all ended, or if none has, the one whose pauses end first.
// t.mu is held.
func (t *Transport) makeRoom(now time.Time) {
	first, firstEnd := "", time.Time{}
	for o, pauses := range t.pace {
		end := pauses[0].until
		for _, p := range pauses[1:] {
			if p.until.After(end) {
				end = p.until
			}
		}
		if !end.After(now) {
			delete(t.pace, o)
		} else if first == "" || end.Before(firstEnd) {
			first, firstEnd = o, end
		}
	}
	if len(t.pace) >= maxPaceOrigins {
		delete(t.pace, first)
	}
}

// paceWait is how long the next request to origin must wait, when
// pacing: until the last of its pauses ends. It forgets ended pauses.
func (t *Transport) paceWait(origin string) time.Duration {
	now := t.clock()
	t.mu.Lock()
	defer t.mu.Unlock()
	pauses, ok := t.pace[origin]
	if !ok {
		return 0
	}
	var wait time.Duration
	live := pauses[:0]
	for _, p := range pauses {
		if d := p.until.Sub(now); d > 0 {
			live = append(live, p)
			if d > wait {
				wait = d
			}
		}
	}
	if len(live) == 0 {
		delete(t.pace, origin)
	} else {
		t.pace[origin] = live
	}
	return wait
}

// origin is u's scheme, host and port, lower case, with the scheme's
// default port when u names none: the unit of pacing.
func origin(u *url.URL) string {
	scheme, port := strings.ToLower(u.Scheme), u.Port()
	if port == "" {
		switch scheme {
		case "http":
			port = "80"
		case "https":
			port = "443"
		}
	}
	return scheme + "://" + net.JoinHostPort(strings.ToLower(u.Hostname()), port)
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
	if items := rateLimitItems(h.Get("RateLimit"), 1); len(items) == 1 {
		return time.Duration(items[0].t) * time.Second, true
	}
	return 0, false
}

// rateLimitItem is one item of an IETF RateLimit field: a policy's name
// (at most maxPolicyName bytes of it), its remaining units r and the
// seconds t until its limit is whole again (at most maxFieldSeconds).
type rateLimitItem struct {
	policy string
	r, t   int64
}

// rateLimitItems reads the complete items among the first n of a
// RateLimit field, such as `"api";r=42;t=17, "day";r=900;t=3600`.
func rateLimitItems(v string, n int) []rateLimitItem {
	var items []rateLimitItem
	for ; v != "" && n > 0; n-- {
		var item string
		item, v, _ = strings.Cut(v, ",")
		name, params, _ := strings.Cut(item, ";")
		it := rateLimitItem{policy: strings.TrimSpace(name)}
		if len(it.policy) > maxPolicyName {
			it.policy = it.policy[:maxPolicyName]
		}
		haveR, haveT := false, false
		for params != "" {
			var p string
			p, params, _ = strings.Cut(params, ";")
			k, val, _ := strings.Cut(strings.TrimSpace(p), "=")
			x, err := strconv.ParseInt(val, 10, 64)
			if err != nil || x < 0 {
				continue
			}
			switch k {
			case "r":
				it.r, haveR = x, true
			case "t":
				if x > maxFieldSeconds {
					x = maxFieldSeconds
				}
				it.t, haveT = x, true
			}
		}
		if haveR && haveT {
			items = append(items, it)
		}
	}
	return items
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
