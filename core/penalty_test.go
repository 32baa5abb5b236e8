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
)

// penaltyLimit is a validated token_bucket limit of rate, burst 1, with a
// Penalty.
func penaltyLimit(t *testing.T, name, rate string, penalty time.Duration) *model.Limit {
	t.Helper()
	l := coretest.Limit(t, name, model.TokenBucket, rate, 1, 0)
	l.Penalty = penalty
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	return l
}

// racePenalised has 32 goroutines ask s 20 times each for the key that
// l holds out, its state whole, and requires that none is admitted.
func racePenalised(t *testing.T, s model.Store, l *model.Limit, key string) {
	t.Helper()
	var admitted, wg = int64(0), sync.WaitGroup{}
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := make([]model.Decision, 1)
			for i := 0; i < 20; i++ {
				if err := s.Take(context.Background(), []model.Ask{{Limit: l, Key: key, Cost: 1}}, out); err != nil {
					t.Error(err)
					return
				}
				if out[0].Allowed {
					atomic.AddInt64(&admitted, 1)
				}
			}
		}()
	}
	wg.Wait()
	if admitted != 0 {
		t.Errorf("%d of 640 requests of a penalised key admitted, want 0", admitted)
	}
}

// TestPenaltyRaceMemory: a key held out in memory, its bucket whole
// again, admits none of 640 concurrent requests.
func TestPenaltyRaceMemory(t *testing.T) {
	s, clock := memStore(t, 0)
	l := penaltyLimit(t, "pen", "1/s", time.Hour)
	out := make([]model.Decision, 1)
	for i := 0; i < 2; i++ {
		if err := s.Take(context.Background(), []model.Ask{{Limit: l, Key: "k", Cost: 1}}, out); err != nil {
			t.Fatal(err)
		}
	}
	if out[0].Allowed || out[0].RetryAfter != time.Hour {
		t.Fatalf("second request: %+v, want refused for the penalty", out[0])
	}
	clock.Advance(time.Minute)
	racePenalised(t, s, l, "k")
}

// TestPenaltyRaceRedis: the same on Redis's clock, where a bucket of
// 1000/s is whole again within a millisecond and the penalty lasts an
// hour.
func TestPenaltyRaceRedis(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	s := newTestRedisStore(t, resptest.Client(t, srv.Addr, 4), false)
	l := penaltyLimit(t, "pen", "1000/s", time.Hour)
	key := coretest.Nonce + "/pen/" + strconv.Itoa(int(time.Now().UnixNano()%1000))
	// Take until refused: 1000/s may refill the token between two.
	refused := false
	for i := 0; i < 100 && !refused; i++ {
		out := make([]model.Decision, 1)
		if err := s.Take(context.Background(), []model.Ask{{Limit: l, Key: key, Cost: 1}}, out); err != nil {
			t.Fatal(err)
		}
		refused = !out[0].Allowed
	}
	if !refused {
		t.Fatal("100 requests of a bucket of 1 admitted")
	}
	racePenalised(t, s, l, key)
}
