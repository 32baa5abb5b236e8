package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeTime is a clock that only the Transport's sleeps move; it records
// each sleep, and a sleep past the context's deadline ends there with
// the context's error, as a timer would.
type fakeTime struct {
	mu     sync.Mutex
	at     time.Time
	sleeps []time.Duration
}

func (f *fakeTime) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at
}

func (f *fakeTime) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sleeps = append(f.sleeps, d)
	if dl, ok := ctx.Deadline(); ok && !f.at.Add(d).Before(dl) {
		f.at = dl
		return context.DeadlineExceeded
	}
	f.at = f.at.Add(d)
	return ctx.Err()
}

// takeSleeps returns the sleeps since the last call.
func (f *fakeTime) takeSleeps() []time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.sleeps
	f.sleeps = nil
	return s
}

// scripted is a Base that sends nothing: it answers each request with
// the status and headers answer gives it, and records the URLs asked.
type scripted struct {
	mu     sync.Mutex
	sent   []string
	answer func(req *http.Request) (status int, header http.Header)
}

func (s *scripted) RoundTrip(req *http.Request) (*http.Response, error) {
	s.mu.Lock()
	s.sent = append(s.sent, req.URL.String())
	s.mu.Unlock()
	status, h := s.answer(req)
	if h == nil {
		h = http.Header{}
	}
	return &http.Response{StatusCode: status, Header: h, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

// fakeTransport is a Transport over base on a fake clock.
func fakeTransport(base http.RoundTripper, tr *Transport) (*Transport, *fakeTime) {
	ft := &fakeTime{at: time.Now()}
	tr.Base, tr.now, tr.sleep = base, ft.now, ft.sleep
	return tr, ft
}

// get sends a GET to url through tr, with a deadline after the fake
// clock's now when deadline is positive, and returns the status.
func get(t *testing.T, tr *Transport, ft *fakeTime, url string, deadline time.Duration) (int, error) {
	t.Helper()
	ctx := context.Background()
	if deadline > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, ft.now().Add(deadline))
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func rateLimit(v string) http.Header { return http.Header{"Ratelimit": {v}} }

func sameDurations(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPaceCappedAtMaxDelay: a RateLimit field that asks for a day's pause
// holds the next request for MaxDelay at most.
func TestPaceCappedAtMaxDelay(t *testing.T) {
	base := &scripted{answer: func(*http.Request) (int, http.Header) { return 200, rateLimit(`"day";r=0;t=86400`) }}
	tr, ft := fakeTransport(base, &Transport{Pace: true, MaxDelay: 100 * time.Millisecond})
	for i := 0; i < 2; i++ {
		if code, err := get(t, tr, ft, "http://a.test/", 0); code != 200 || err != nil {
			t.Fatalf("request %d: %d %v", i, code, err)
		}
	}
	if s := ft.takeSleeps(); !sameDurations(s, []time.Duration{100 * time.Millisecond}) {
		t.Errorf("slept %v, want [100ms]", s)
	}
}

// TestPacePerOrigin: a pause one origin asks for holds only requests to
// that origin: scheme, host and port (the scheme's default when absent).
func TestPacePerOrigin(t *testing.T) {
	base := &scripted{answer: func(r *http.Request) (int, http.Header) {
		if r.URL.String() == "http://a.test/" {
			return 200, rateLimit(`"api";r=0;t=10`)
		}
		return 200, nil
	}}
	tr, ft := fakeTransport(base, &Transport{Pace: true})
	for _, url := range []string{"http://a.test/", "http://b.test/", "http://a.test:8080/", "https://a.test/", "http://A.TEST:80/x"} {
		if code, err := get(t, tr, ft, url, 0); code != 200 || err != nil {
			t.Fatalf("%s: %d %v", url, code, err)
		}
		want := []time.Duration(nil)
		if url == "http://A.TEST:80/x" { // the origin of http://a.test/
			want = []time.Duration{10 * time.Second}
		}
		if s := ft.takeSleeps(); !sameDurations(s, want) {
			t.Errorf("%s: slept %v, want %v", url, s, want)
		}
	}
}

// TestPacePerPolicy: each policy of an origin paces by its latest field,
// which neither another policy's field erases nor an older field of its
// own outlasts.
func TestPacePerPolicy(t *testing.T) {
	var answers = []string{
		`"minute";r=0;t=6`,    // minute: 6 s
		`"search";r=9;t=10`,   // search: 1 s, minute still 6 s
		`"minute";r=0;t=20`,   // minute: 20 s
		`"minute";r=99;t=100`, // minute: 1 s
		``,
	}
	n := 0
	base := &scripted{answer: func(*http.Request) (int, http.Header) {
		v := answers[n]
		n++
		return 200, rateLimit(v)
	}}
	tr, ft := fakeTransport(base, &Transport{Pace: true})
	for i, c := range []struct {
		deadline time.Duration
		want     []time.Duration
	}{
		{0, nil},
		{time.Second, nil}, // a 6 s pause outlasts the deadline: sent at once
		{0, []time.Duration{6 * time.Second}},
		{time.Second, nil},
		{0, []time.Duration{time.Second}},
	} {
		if code, err := get(t, tr, ft, "http://a.test/", c.deadline); code != 200 || err != nil {
			t.Fatalf("request %d: %d %v", i, code, err)
		}
		if s := ft.takeSleeps(); !sameDurations(s, c.want) {
			t.Errorf("request %d: slept %v, want %v", i, s, c.want)
		}
	}
}

// TestPaceWithinDeadline: a pause longer than the time left before the
// request's deadline is not waited out: the request is sent at once.
func TestPaceWithinDeadline(t *testing.T) {
	base := &scripted{answer: func(*http.Request) (int, http.Header) { return 200, rateLimit(`"api";r=0;t=5`) }}
	tr, ft := fakeTransport(base, &Transport{Pace: true})
	if code, err := get(t, tr, ft, "http://a.test/", 0); code != 200 || err != nil {
		t.Fatalf("first request: %d %v", code, err)
	}
	if code, err := get(t, tr, ft, "http://a.test/", 2*time.Second); code != 200 || err != nil || len(base.sent) != 2 {
		t.Errorf("request with 2 s left behind a 5 s pause: %d %v, %d sent; want 200 and sent", code, err, len(base.sent))
	}
	if s := ft.takeSleeps(); len(s) != 0 {
		t.Errorf("slept %v, want none", s)
	}
}

// TestPaceNotFromAnswered429: a 429 handed back to the caller (its wait
// longer than MaxDelay, or a request that may not be repeated) sets no
// pause for later requests.
func TestPaceNotFromAnswered429(t *testing.T) {
	for _, c := range []struct {
		name, method string
		header       http.Header
	}{
		{"past MaxDelay", http.MethodGet, http.Header{"Retry-After": {"86400"}, "Ratelimit": {`"day";r=0;t=86400`}}},
		{"RateLimit past MaxDelay", http.MethodGet, rateLimit(`"day";r=0;t=86400`)},
		{"POST", http.MethodPost, http.Header{"Retry-After": {"5"}, "Ratelimit": {`"api";r=0;t=5`}}},
	} {
		first := true
		base := &scripted{answer: func(*http.Request) (int, http.Header) {
			if first {
				first = false
				return http.StatusTooManyRequests, c.header
			}
			return 200, nil
		}}
		tr, ft := fakeTransport(base, &Transport{Pace: true, MaxDelay: 100 * time.Millisecond})
		req, _ := http.NewRequest(c.method, "http://a.test/", nil)
		if resp, err := tr.RoundTrip(req); err != nil || resp.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("%s: %v %v, want the 429", c.name, resp, err)
		}
		if code, err := get(t, tr, ft, "http://a.test/", 0); code != 200 || err != nil {
			t.Errorf("%s: next request %d %v", c.name, code, err)
		}
		if s := ft.takeSleeps(); len(s) != 0 {
			t.Errorf("%s: slept %v, want none", c.name, s)
		}
	}
}

// TestRetried429WaitsOnce: a 429 retried after its Retry-After is not
// waited for a second time by pacing on its RateLimit field's t.
func TestRetried429WaitsOnce(t *testing.T) {
	first := true
	base := &scripted{answer: func(*http.Request) (int, http.Header) {
		if first {
			first = false
			return http.StatusTooManyRequests, http.Header{"Retry-After": {"1"}, "Ratelimit": {`"api";r=0;t=10`}}
		}
		return 200, nil
	}}
	tr, ft := fakeTransport(base, &Transport{Pace: true, Rand: func() float64 { return 0 }})
	if code, err := get(t, tr, ft, "http://a.test/", 0); code != 200 || err != nil {
		t.Fatalf("%d %v", code, err)
	}
	if s := ft.takeSleeps(); !sameDurations(s, []time.Duration{time.Second}) {
		t.Errorf("slept %v, want [1s]: the Retry-After alone", s)
	}
}

// TestJitterCappedAtMaxDelay: the jitter lengthens a wait the server
// asks for up to MaxDelay, not past it.
func TestJitterCappedAtMaxDelay(t *testing.T) {
	first := true
	base := &scripted{answer: func(*http.Request) (int, http.Header) {
		if first {
			first = false
			return http.StatusTooManyRequests, http.Header{"Retry-After": {"1"}}
		}
		return 200, nil
	}}
	tr, ft := fakeTransport(base, &Transport{MaxDelay: time.Second, Rand: func() float64 { return 0.99 }})
	if code, err := get(t, tr, ft, "http://a.test/", 0); code != 200 || err != nil {
		t.Fatalf("%d %v", code, err)
	}
	if s := ft.takeSleeps(); !sameDurations(s, []time.Duration{time.Second}) {
		t.Errorf("slept %v, want [1s]", s)
	}
}

// TestPaceMemoryBounded: neither many origins, nor many or long policy
// names, nor a long host grow the pacing state past its bounds.
func TestPaceMemoryBounded(t *testing.T) {
	long := strings.Repeat("p", 64<<10)
	var field strings.Builder
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&field, `"%d%s";r=0;t=10, `, i, long)
	}
	base := &scripted{answer: func(r *http.Request) (int, http.Header) {
		if r.URL.Host == "many.test" {
			return 200, rateLimit(field.String())
		}
		return 200, rateLimit(`"api";r=0;t=10`)
	}}
	tr, ft := fakeTransport(base, &Transport{Pace: true})
	for i := 0; i < 3*maxPaceOrigins; i++ {
		if code, err := get(t, tr, ft, fmt.Sprintf("http://h%d.test/", i), 0); code != 200 || err != nil {
			t.Fatalf("request %d: %d %v", i, code, err)
		}
	}
	if _, err := get(t, tr, ft, "http://many.test/", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := get(t, tr, ft, "http://"+strings.Repeat("a", 1000)+".test/", 0); err != nil {
		t.Fatal(err)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if len(tr.pace) > maxPaceOrigins {
		t.Errorf("%d origins paced, want at most %d", len(tr.pace), maxPaceOrigins)
	}
	pauses := tr.pace["http://many.test:80"]
	if len(pauses) != maxPacePolicies {
		t.Errorf("many.test: %d policies paced, want %d", len(pauses), maxPacePolicies)
	}
	for _, p := range pauses {
		if len(p.policy) > maxPolicyName {
			t.Errorf("a policy name of %d bytes kept", len(p.policy))
		}
	}
	for o := range tr.pace {
		if len(o) > maxOriginLen {
			t.Errorf("an origin of %d bytes kept", len(o))
		}
	}
	if len(ft.takeSleeps()) != 0 {
		t.Error("a request to a new origin waited")
	}
}

// TestHugeFieldSecondsNotRetriedAtOnce: a 429 whose RateLimit t is too
// large for a time.Duration is a wait longer than MaxDelay: handed back,
// not retried after whatever the overflow leaves (290 ms for this t).
func TestHugeFieldSecondsNotRetriedAtOnce(t *testing.T) {
	base := &scripted{answer: func(*http.Request) (int, http.Header) {
		return http.StatusTooManyRequests, rateLimit(`"api";r=0;t=18446744074`)
	}}
	tr, ft := fakeTransport(base, &Transport{})
	if code, err := get(t, tr, ft, "http://a.test/", 0); code != http.StatusTooManyRequests || err != nil || len(base.sent) != 1 {
		t.Errorf("%d %v after %d attempts, want the 429 after one", code, err, len(base.sent))
	}
	if s := ft.takeSleeps(); len(s) != 0 {
		t.Errorf("slept %v, want none", s)
	}
}
