package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/model"
)

// TestRedisAbandonedDecisionNotSent settles whether go-redis's automatic
// pipeline sends a decision, or a slot lease, whose caller's context
// ended while it was queued, on a server and on a one-node Cluster: one
// still queued when its context ends is never written (its caller has had
// the failure policy's answer), while one already written runs, once.
func TestRedisAbandonedDecisionNotSent(t *testing.T) {
	flight := &model.Limit{Name: "slots", MaxInFlight: 10}
	if err := flight.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, r := range startProxiedRedis(t) {
		st := newTestStore(t, r.cfg, "abandoned:", 0)
		slots := st.(model.SlotStore)
		slot := []model.Ask{{Limit: flight, Key: "k", Cost: 1}}
		for _, c := range []struct {
			name string
			do   func(ctx context.Context, lease string) error
		}{
			{"decision", func(ctx context.Context, _ string) error {
				_, err := take(ctx, st, "k")
				return err
			}},
			{"slot lease", func(ctx context.Context, lease string) error {
				return slots.AcquireSlots(ctx, slot, lease, time.Minute, make([]model.Decision, 1))
			}},
		} {
			t.Run(r.name+"/"+c.name, func(t *testing.T) {
				if err := c.do(context.Background(), "warm"); err != nil {
					t.Fatal(err) // connects and loads the script
				}

				// Queued, then abandoned: two calls, between two others,
				// wait behind a first one of the same key whose reply the
				// proxy holds; all four go in one batch.
				calls, sent := r.server.ScriptCalls(t), r.proxy.Sent("evalsha")
				r.proxy.Hold()
				first := make(chan error, 1)
				go func() { first <- c.do(context.Background(), "first") }()
				r.proxy.WaitSent(t, "evalsha", sent+1)
				ctx, cancel := context.WithCancel(context.Background())
				abandoned, live := make(chan error, 2), make(chan error, 2)
				for _, q := range []struct {
					lease string
					ctx   context.Context
					out   chan error
				}{
					{"abandoned1", ctx, abandoned},
					{"live1", context.Background(), live},
					{"abandoned2", ctx, abandoned},
					{"live2", context.Background(), live},
				} {
					w := newWaitWatch(q.ctx)
					go func() { q.out <- c.do(w, q.lease) }()
					w.waited(t)
				}
				cancel()
				for range 2 {
					if err := <-abandoned; !errors.Is(err, context.Canceled) {
						t.Errorf("an abandoned call returned %v, want context.Canceled", err)
					}
				}
				r.proxy.Release()
				if err := <-first; err != nil {
					t.Fatal(err)
				}
				for range 2 {
					if err := <-live; err != nil {
						t.Errorf("a call queued with abandoned ones failed: %v", err)
					}
				}
				if n := r.proxy.Sent("evalsha") - sent; n != 3 {
					t.Errorf("%d script calls written for 3 calls and 2 abandoned while queued", n)
				}
				if n := r.server.ScriptCalls(t) - calls; n != 3 {
					t.Errorf("Redis ran the script %d times for 3 calls and 2 abandoned while queued", n)
				}

				// Written, then abandoned: the call may run, and does,
				// once.
				calls, sent = r.server.ScriptCalls(t), r.proxy.Sent("evalsha")
				r.proxy.Hold()
				ctx, cancel = context.WithCancel(context.Background())
				go func() { abandoned <- c.do(ctx, "written") }()
				r.proxy.WaitSent(t, "evalsha", sent+1)
				cancel()
				if err := <-abandoned; !errors.Is(err, context.Canceled) {
					t.Errorf("the abandoned call returned %v, want context.Canceled", err)
				}
				r.proxy.Release()
				if err := c.do(context.Background(), "last"); err != nil {
					t.Fatal(err)
				}
				if n := r.server.ScriptCalls(t) - calls; n != 2 {
					t.Errorf("Redis ran the script %d times for a call and one abandoned once written", n)
				}
			})
		}
		// What the calls left: the decisions warm, first, live1, live2,
		// written and last charged; the leases of the same names taken.
		t.Run(r.name+"/left", func(t *testing.T) {
			if n := charges(t, st, "k"); n != 6 {
				t.Errorf("the key was charged %d times, want 6", n)
			}
			direct := redis.NewClient(&redis.Options{Addr: r.server.Addr, Protocol: 2, DisableIdentity: true})
			defer direct.Close()
			key := st.(interface {
				StateKey(*model.Limit, string) string
			}).StateKey(flight.Flight(), "k")
			taken, err := direct.ZRange(context.Background(), key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(taken)
			if fmt.Sprint(taken) != "[first last live1 live2 warm written]" {
				t.Errorf("the slots taken are %v, want those of first, last, live1, live2, warm and written", taken)
			}
		})
	}
}
