package core

import (
	"context"
	"strconv"
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

// TestParseStatusSet: codes and classes parse; anything else fails
// naming count_status and the status.
func TestParseStatusSet(t *testing.T) {
	s, err := model.ParseStatusSet([]string{"401", "403", "429", "5xx"})
	if err != nil {
		t.Fatal(err)
	}
	for status, want := range map[int]bool{401: true, 403: true, 429: true, 502: true, 504: true, 200: false, 404: false, 0: true} {
		if got := model.Counts(s, status); got != want {
			t.Errorf("Counts(%v, %d) = %v, want %v", s, status, got, want)
		}
	}
	if !model.Counts(nil, 200) {
		t.Error("a nil set counts every response")
	}
	for _, bad := range []string{"99", "600", "6xx", "0xx", "4x1", "40", "4011", "-01", "+01", ""} {
		if _, err := model.ParseStatusSet([]string{bad}); err == nil {
			t.Errorf("%q parsed", bad)
		} else if fe, ok := err.(*model.FieldError); !ok || fe.Field != "count_status" || fe.Value != bad {
			t.Errorf("%q: %v, want a FieldError of count_status naming it", bad, err)
		}
	}
	l := coretest.Limit(t, "c", model.TokenBucket, "5/m", 5, 0)
	l.CountStatus, l.Lease = s, 1
	if err := l.Validate(); err == nil {
		t.Error("count_status with a lease validated")
	}
}

// countedGate is a gate on s of a token_bucket of 5 a period (an hour
// on Redis, whose clock runs) and burst 5 that counts 401 and 403.
func countedGate(t *testing.T, s model.Store, rate string, clock model.Clock) (*Gate, *model.Limit) {
	t.Helper()
	l := coretest.Limit(t, "login", model.TokenBucket, rate, 5, 0)
	set, err := model.ParseStatusSet([]string{"401", "403"})
	if err != nil {
		t.Fatal(err)
	}
	l.CountStatus = set
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: s, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	return g, l
}

// attempt decides one request of key and, when admitted, settles it with
// status; it reports whether it was admitted.
func attempt(g *Gate, l *model.Limit, key string, status int) bool {
	asks := []model.Ask{{Limit: l, Key: key, Cost: 1}}
	v := g.Decide(context.Background(), asks)
	if v.Outcome != OutcomeAllowed {
		return false
	}
	g.Answered(context.Background(), asks, &v, status, nil, 0)
	return true
}

// raceCounted checks on the gate's store the bound of counted responses
// under concurrency, exactly:
//   - 4 failures (401) are admitted and kept; then 32 goroutines race 10
//     times each for the last token with requests answered 200, each
//     given back: whatever the interleaving, the last token is whole
//     again after them, so one failure is admitted and the next refused;
//   - on a fresh key, 64 goroutines each send one request, half answered
//     403, half 200: at most 5 failures are admitted, and afterwards
//     exactly 5 less those failures remain, which sequential failures
//     then take.
func raceCounted(t *testing.T, g *Gate, l *model.Limit, key string) {
	t.Helper()
	for i := 0; i < 4; i++ {
		if !attempt(g, l, key, 401) {
			t.Fatalf("failure %d refused, want admitted", i+1)
		}
	}
	var wg sync.WaitGroup
	var won int64
	for i := 0; i < 32; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 10; j++ {
				if attempt(g, l, key, 200) {
					atomic.AddInt64(&won, 1)
				}
			}
		}()
	}
	wg.Wait()
	if won == 0 {
		t.Fatal("no successful request admitted on the last token")
	}
	if !attempt(g, l, key, 401) {
		t.Fatalf("after %d successes on the last token, a failure refused: a refund was not exact", won)
	}
	if attempt(g, l, key, 401) {
		t.Fatal("a sixth failure admitted")
	}

	key += "/fresh"
	var failures int64
	for i := 0; i < 64; i++ {
		status := 200
		if i%2 == 0 {
			status = 403
		}
		wg.Add(1)
		go func(status int) {
			defer wg.Done()
			if attempt(g, l, key, status) && status == 403 {
				atomic.AddInt64(&failures, 1)
			}
		}(status)
	}
	wg.Wait()
	if failures > 5 {
		t.Fatalf("%d failures admitted, more than 5", failures)
	}
	for i := failures; i < 5; i++ {
		if !attempt(g, l, key, 401) {
			t.Fatalf("after %d failures of the race, failure %d refused: a success kept its charge", failures, i+1)
		}
	}
	if attempt(g, l, key, 401) {
		t.Fatalf("after %d failures of the race, a sixth failure admitted", failures)
	}
}

// TestCountStatusMemory: the bound of counted responses, exact, in
// memory on a frozen clock.
func TestCountStatusMemory(t *testing.T) {
	s, clock := memStore(t, 0)
	g, l := countedGate(t, s, "5/m", clock.Now)
	raceCounted(t, g, l, "k")
}

// TestCountStatusRedis: the same on Redis, whose clock runs: 5 an hour
// refills no whole token during the test.
func TestCountStatusRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := newTestRedisStore(t, resptest.Client(t, srv.Addr, 4), false)
	g, l := countedGate(t, s, "5/h", nil)
	raceCounted(t, g, l, coretest.Nonce+"/count/"+strconv.Itoa(int(time.Now().UnixNano()%1000)))
}

// TestAnsweredCutShort: a request cut short keeps its charge: no status
// (the handler panicked or wrote nothing the host saw), a client gone
// (its context ended) or an upgraded connection (101, all Caddy's
// recorder sees of a WebSocket), even when the status would not count;
// an upstream timeout answered 504 counts only if the set holds it.
func TestAnsweredCutShort(t *testing.T) {
	clock := testclock.New(testclock.Epoch)
	g, l := countedGate(t, nil, "5/m", clock.Now)
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	asks := []model.Ask{{Limit: l, Key: "k", Cost: 1}}
	for i, c := range []struct {
		ctx    context.Context
		status int
	}{{context.Background(), 0}, {gone, 200}, {context.Background(), 101}, {context.Background(), 401}, {context.Background(), 504}} {
		v := g.Decide(context.Background(), asks)
		if v.Outcome != OutcomeAllowed {
			t.Fatalf("request %d refused", i)
		}
		g.Answered(c.ctx, asks, &v, c.status, nil, 0)
	}
	// 4 charges kept (the 504 given back): one request left.
	if v := g.Decide(context.Background(), asks); v.Outcome != OutcomeAllowed || v.Decision.Remaining != 0 {
		t.Fatalf("fifth charge: %+v, want admitted with nothing remaining", v)
	}
}
