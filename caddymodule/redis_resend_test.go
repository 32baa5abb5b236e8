package caddymodule

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/internal/redistest"
)

// proxiedRedis is a Redis that the module's stores reach through a
// redistest.Proxy.
type proxiedRedis struct {
	name   string
	cfg    RedisStoreConfig  // a store of it, through proxy
	proxy  *redistest.Proxy  // between the store and server
	server *redistest.Server // the server that runs the scripts
}

// startProxiedRedis starts a standalone server and a one-node Redis
// Cluster, each behind a proxy (the node announces the proxy's address,
// so that the cluster client reaches it only through the proxy).
func startProxiedRedis(t *testing.T) []proxiedRedis {
	rs := redistest.Start(t, redistest.Options{})
	ps := redistest.StartProxy(t, rs.Addr)
	cl := redistest.StartOneNodeCluster(t)
	pc := redistest.StartProxy(t, cl.Addrs[0])
	cl.Nodes[0].Announce(t, pc.Port)
	timeout := caddy.Duration(2 * time.Second)
	return []proxiedRedis{
		{"server", RedisStoreConfig{Address: ps.Addr, Timeout: timeout}, ps, rs},
		{"cluster", RedisStoreConfig{Addresses: []string{pc.Addr}, Timeout: timeout}, pc, cl.Nodes[0]},
	}
}

// newTestStore returns the store newRedisStore builds of cfg under
// prefix, sending up to direct decisions on connections of their own;
// destructed when the test ends.
func newTestStore(t *testing.T, cfg RedisStoreConfig, prefix string, direct int64) model.Store {
	t.Helper()
	cfg.Prefix = prefix
	p, err := newRedisStore(&cfg, direct)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Destruct() })
	return p.store
}

// resendLimit is a token bucket of 100 that refills by one a day, so
// that what a key has left tells how many times it was charged.
var resendLimit = func() *model.Limit {
	l := &model.Limit{Name: "resend", Rate: model.Rate{Quota: 1, Period: 24 * time.Hour}, Burst: 100}
	if err := l.Validate(); err != nil {
		panic(err)
	}
	return l
}()

// take asks st for one unit of key under resendLimit.
func take(ctx context.Context, st model.Store, key string) (model.Decision, error) {
	out := make([]model.Decision, 1)
	err := st.Take(ctx, []model.Ask{{Limit: resendLimit, Key: key, Cost: 1}}, out)
	return out[0], err
}

// charges returns how many units key has been charged under resendLimit,
// itself charging one more.
func charges(t *testing.T, st model.Store, key string) int {
	t.Helper()
	d, err := take(context.Background(), st, key)
	if err != nil {
		t.Fatalf("taking %s: %v", key, err)
	}
	return 100 - 1 - int(math.Round(d.Remaining))
}

// TestRedisDroppedReplyNotResent drops the reply of a decision after
// Redis ran it, on a server and on a one-node Cluster, for a decision
// sent on a connection of its own and one sent through go-redis's
// automatic pipeline: the caller gets an error (for the failure policy to
// decide), and Redis ran the script once, the key charged once.
func TestRedisDroppedReplyNotResent(t *testing.T) {
	for _, r := range startProxiedRedis(t) {
		for _, m := range []struct {
			name   string
			direct int64
		}{{"direct", directDecisions}, {"pipelined", 0}} {
			t.Run(r.name+"/"+m.name, func(t *testing.T) {
				st := newTestStore(t, r.cfg, "dropped-"+m.name+":", m.direct)
				if _, err := take(context.Background(), st, "k"); err != nil {
					t.Fatal(err) // connects and loads the script
				}
				cuts, calls := r.proxy.Cuts(), r.server.ScriptCalls(t)
				r.proxy.Cut(1, 0)
				if _, err := take(context.Background(), st, "k"); err == nil {
					t.Error("a decision whose reply was lost succeeded")
				}
				if r.proxy.Cuts() != cuts+1 {
					t.Fatalf("the proxy cut %d connections, want 1", r.proxy.Cuts()-cuts)
				}
				if n := r.server.ScriptCalls(t) - calls; n != 1 {
					t.Errorf("Redis ran the script %d times, want 1", n)
				}
				if n := charges(t, st, "k"); n != 2 {
					t.Errorf("the key was charged %d times for 2 decisions", n)
				}
			})
		}
	}
}

// TestRedisDroppedBatchReplyNotResent drops the connection of a batch of
// go-redis's automatic pipeline after two of its six replies, on a server
// and on a one-node Cluster: the two callers whose replies came are
// answered, the four others get an error, and no decision is run twice.
func TestRedisDroppedBatchReplyNotResent(t *testing.T) {
	for _, r := range startProxiedRedis(t) {
		t.Run(r.name, func(t *testing.T) {
			st := newTestStore(t, r.cfg, "batch:", 0)
			if _, err := take(context.Background(), st, "k"); err != nil {
				t.Fatal(err)
			}
			calls, sent := r.server.ScriptCalls(t), r.proxy.Sent("evalsha")
			// A first decision holds the pipeline while six queue behind
			// it; they go as one batch once its reply comes.
			r.proxy.Hold()
			first := make(chan error, 1)
			go func() {
				_, err := take(context.Background(), st, "k")
				first <- err
			}()
			r.proxy.WaitSent(t, "evalsha", sent+1)
			errs := queueTakes(t, st, "k", 6)
			r.proxy.Cut(6, 2)
			r.proxy.Release()
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			failed := 0
			for range 6 {
				if err := <-errs; err != nil {
					failed++
				}
			}
			if r.proxy.Cuts() != 1 {
				t.Fatalf("the proxy cut %d connections, want 1", r.proxy.Cuts())
			}
			// go-redis fails the whole batch on a server, the replies read
			// included, and on a Cluster only the commands whose replies
			// it could not read.
			if failed < 4 {
				t.Errorf("%d of 6 decisions failed, want at least the 4 whose replies were lost", failed)
			}
			if n := r.server.ScriptCalls(t) - calls; n != 7 {
				t.Errorf("Redis ran the script %d times for 7 decisions", n)
			}
			if n := charges(t, st, "k"); n != 8 {
				t.Errorf("the key was charged %d times for 8 decisions", n)
			}
		})
	}
}

// queueTakes starts n decisions of key on st, each in a goroutine, and
// returns once each waits for its reply, its command queued in go-redis's
// automatic pipeline; their errors come on the channel returned.
func queueTakes(t *testing.T, st model.Store, key string, n int) <-chan error {
	errs := make(chan error, n)
	for range n {
		ctx := newWaitWatch(context.Background())
		go func() {
			_, err := take(ctx, st, key)
			errs <- err
		}()
		ctx.waited(t)
	}
	return errs
}

// waitWatch is a context that tells when something first waits on it.
// go-redis's automatic pipeline waits on its caller's context only once
// it has queued the caller's command (AutoFuture.WaitContext).
type waitWatch struct {
	context.Context
	once    sync.Once
	waiting chan struct{}
}

func newWaitWatch(parent context.Context) *waitWatch {
	return &waitWatch{Context: parent, waiting: make(chan struct{})}
}

// Done is the parent's, and tells that it was called.
func (c *waitWatch) Done() <-chan struct{} {
	c.once.Do(func() { close(c.waiting) })
	return c.Context.Done()
}

// waited waits until something waits on c, failing t after 10 seconds.
func (c *waitWatch) waited(t *testing.T) {
	t.Helper()
	select {
	case <-c.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("no wait on the context within 10s")
	}
}

// TestRedisClusterRedirectFollowed moves a key's slot to another master
// of a three-master Cluster once the store's client has read the slot
// map: a decision sent while the slot migrates is redirected by ASK, one
// sent after it moved by MOVED, on a connection of its own and through
// go-redis's automatic pipeline. Each redirection is followed: the
// decision succeeds, run once, by the slot's new master.
func TestRedisClusterRedirectFollowed(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	ctx := context.Background()
	for _, m := range []struct {
		name   string
		direct int64
	}{{"direct", directDecisions}, {"pipelined", 0}} {
		st := newTestStore(t, RedisStoreConfig{Addresses: cl.Addrs, Timeout: caddy.Duration(2 * time.Second)}, "redirect-"+m.name+":", m.direct)
		if _, err := take(ctx, st, "warm"); err != nil {
			t.Fatal(err) // reads the slot map, loads the script on every master
		}
		for _, redirect := range []string{"ASK", "MOVED"} {
			t.Run(m.name+"/"+redirect, func(t *testing.T) {
				// The prefix is not in the hash tag: a key of its own per
				// mode, so that each has a slot of its own.
				client := redirect + "-" + m.name
				key := st.(interface {
					StateKey(*model.Limit, string) string
				}).StateKey(resendLimit, client)
				slot, err := rc.ClusterKeySlot(ctx, key).Result()
				if err != nil {
					t.Fatal(err)
				}
				master, err := rc.MasterForKey(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				from := -1
				for i, a := range cl.Addrs {
					if a == master.Options().Addr {
						from = i
					}
				}
				to := (from + 1) % len(cl.Nodes)
				cl.SetSlotMigrating(t, int(slot), from, to)
				if redirect == "MOVED" {
					cl.SetSlotNode(t, int(slot), to)
				}
				before := []int{cl.Nodes[from].ScriptCalls(t), cl.Nodes[to].ScriptCalls(t), cl.Nodes[from].ScriptsRefused(t)}
				if _, err := take(ctx, st, client); err != nil {
					t.Fatalf("a decision redirected by %s failed: %v", redirect, err)
				}
				if n := cl.Nodes[from].ScriptsRefused(t) - before[2]; n != 1 {
					t.Errorf("the slot's former master redirected the decision %d times, want 1", n)
				}
				if n := cl.Nodes[from].ScriptCalls(t) - before[0]; n != 0 {
					t.Errorf("the slot's former master ran the script %d times", n)
				}
				if n := cl.Nodes[to].ScriptCalls(t) - before[1]; n != 1 {
					t.Errorf("the slot's new master ran the script %d times, want 1", n)
				}
			})
		}
	}
}
