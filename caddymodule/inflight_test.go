package caddymodule

import (
	"context"
	"math/rand"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// slowBackend is the handler after sluice in the in-flight tests: it
// holds every request for hold (or until the client leaves), counting the
// requests inside it at once. It runs as the Caddy module
// http.handlers.sluice_test_slow, found by its name in slowBackends.
type slowBackend struct {
	hold                 time.Duration
	inside, most, served int64
}

var slowBackends sync.Map // name → *slowBackend

func init() { caddy.RegisterModule(slowHandler{}) }

// slowHandler is the Caddy module of a slowBackend.
type slowHandler struct {
	Backend string `json:"backend"`
}

func (slowHandler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.sluice_test_slow", New: func() caddy.Module { return new(slowHandler) }}
}

func (h slowHandler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	v, _ := slowBackends.Load(h.Backend)
	b := v.(*slowBackend)
	n := atomic.AddInt64(&b.inside, 1)
	for {
		m := atomic.LoadInt64(&b.most)
		if n <= m || atomic.CompareAndSwapInt64(&b.most, m, n) {
			break
		}
	}
	atomic.AddInt64(&b.served, 1)
	select {
	case <-time.After(b.hold):
	case <-r.Context().Done():
	}
	atomic.AddInt64(&b.inside, -1)
	return nil
}

func newSlowBackend(t *testing.T, hold time.Duration) *slowBackend {
	t.Helper()
	b := &slowBackend{hold: hold}
	slowBackends.Store(t.Name(), b)
	t.Cleanup(func() { slowBackends.Delete(t.Name()) })
	return b
}

// slowServer is a server whose sluice handler (JSON without "handler")
// is followed by the slow backend of the test t.
func slowServer(t *testing.T, port int, handler map[string]any) server {
	h := map[string]any{"handler": "sluice"}
	for k, v := range handler {
		h[k] = v
	}
	return server{port: port, extra: map[string]any{"routes": []any{map[string]any{"handle": []any{
		h,
		map[string]any{"handler": "sluice_test_slow", "backend": t.Name()},
	}}}}}
}

// flightStore is a store the in-flight tests run on: its JSON, and a
// count of the slots held in it.
type flightStore struct {
	json map[string]any
	held func(t *testing.T) int
}

// flightStores are the stores the in-flight tests run on: memory, and a
// real Redis started by the test.
func flightStores(t *testing.T) map[string]func() flightStore {
	return map[string]func() flightStore{
		"memory": func() flightStore {
			return flightStore{map[string]any{"memory": map[string]any{"max_keys": 4096}}, heldSlots}
		},
		"redis": func() flightStore {
			rs := redistest.Start(t, redistest.Options{})
			return flightStore{redisStore(rs.Addr, 16, "lease_ttl", "5s"), func(t *testing.T) int { return heldLeases(t, rs.Addr) }}
		},
	}
}

// heldLeases counts the leases in a Redis's in-flight sets, expired ones
// included: every request's lease is removed when it ends.
func heldLeases(t *testing.T, addr string) int {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	ctx := context.Background()
	keys, err := rc.Keys(ctx, "*:in_flight:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range keys {
		c, err := rc.ZCard(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		n += int(c)
	}
	return n
}

// TestInFlightKPlusOne sends K+1 slow requests at once: exactly K reach
// the backend, the other is answered 429 with the concurrency policy; once
// they are done, K more all pass (no slot leaked).
func TestInFlightKPlusOne(t *testing.T) {
	for name, store := range flightStores(t) {
		t.Run(name, func(t *testing.T) {
			st := store()
			const k = 3
			b := newSlowBackend(t, 300*time.Millisecond)
			urls := loadCaddy(t, slowServer(t, freePorts(t, 1)[0], map[string]any{
				"zones": []any{map[string]any{"name": "conc", "key": "all", "max_in_flight": k}},
				"store": st.json,
			}))
			var mu sync.Mutex
			var rejected []response
			counts := map[int]int{}
			var wg sync.WaitGroup
			for i := 0; i < k+1; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := fetch(urls[0])
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					counts[r.status]++
					if r.status == http.StatusTooManyRequests {
						rejected = append(rejected, r)
					}
					mu.Unlock()
				}()
			}
			wg.Wait()
			if counts[200] != k || counts[429] != 1 || b.most != k {
				t.Fatalf("statuses %v, backend saw at most %d at once; want %d × 200, 1 × 429, %d at once", counts, b.most, k, k)
			}
			h := rejected[0].header
			if h.Get("Retry-After") != "1" || h.Get("RateLimit-Policy") != `"conc";q=3;qu="concurrent-requests"` || h.Get("RateLimit") != `"conc";r=0;t=1` {
				t.Errorf("429 headers: %v", h)
			}
			if got := concurrently(t, urls, k); got[200] != k {
				t.Errorf("after the first requests ended, %d concurrent requests: %v, want all 200 (a slot leaked)", k, got)
			}
		})
	}
}

// TestInFlightUnderLoad sends requests from more clients than slots for a
// while and checks that the backend never has more than K of them at
// once, and K at some point.
func TestInFlightUnderLoad(t *testing.T) {
	for name, store := range flightStores(t) {
		t.Run(name, func(t *testing.T) {
			st := store()
			const k, clients, n = 4, 24, 1200
			b := newSlowBackend(t, 3*time.Millisecond)
			urls := loadCaddy(t, slowServer(t, freePorts(t, 1)[0], map[string]any{
				"zones": []any{map[string]any{"name": "conc", "key": "all", "rate": "1000000/s", "max_in_flight": k}},
				"store": st.json,
			}))
			var next, ok, limited int64
			var wg sync.WaitGroup
			for i := 0; i < clients; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for atomic.AddInt64(&next, 1) <= n {
						r, err := fetch(urls[0])
						switch {
						case err != nil:
							t.Error(err)
							return
						case r.status == 200:
							atomic.AddInt64(&ok, 1)
						case r.status == 429:
							atomic.AddInt64(&limited, 1)
						default:
							t.Errorf("status %d", r.status)
						}
					}
				}()
			}
			wg.Wait()
			t.Logf("%s: %d requests from %d clients: %d served, %d rejected; the backend saw at most %d at once (max_in_flight %d)", name, n, clients, ok, limited, b.most, k)
			if b.most != k || ok+limited != n {
				t.Errorf("backend saw at most %d at once, want %d; %d answered of %d", b.most, k, ok+limited, n)
			}
		})
	}
}

// TestInFlightNoLeakOnCancel sends 10,000 requests into a slow backend
// from clients that give up after a random time (most of them while the
// backend holds them, some before sluice has decided), then checks that no
// slot is held: none is counted in the store, and K concurrent requests
// all pass.
func TestInFlightNoLeakOnCancel(t *testing.T) {
	for name, store := range flightStores(t) {
		t.Run(name, func(t *testing.T) {
			st := store()
			const k, clients, n = 8, 32, 10000
			b := newSlowBackend(t, 2*time.Millisecond)
			urls := loadCaddy(t, slowServer(t, freePorts(t, 1)[0], map[string]any{
				"zones": []any{map[string]any{"name": "conc", "key": "all", "max_in_flight": k}},
				"store": st.json,
			}))
			tr := &http.Transport{MaxIdleConnsPerHost: clients}
			defer tr.CloseIdleConnections()
			c := &http.Client{Transport: tr}
			start := time.Now()
			var next, cancelled int64
			var wg sync.WaitGroup
			for i := 0; i < clients; i++ {
				seed := int64(i)
				wg.Add(1)
				go func() {
					defer wg.Done()
					rnd := rand.New(rand.NewSource(seed))
					for atomic.AddInt64(&next, 1) <= n {
						ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rnd.Intn(20000))*time.Microsecond)
						req, _ := http.NewRequestWithContext(ctx, http.MethodGet, urls[0], nil)
						res, err := c.Do(req)
						if err != nil {
							atomic.AddInt64(&cancelled, 1)
						} else {
							res.Body.Close()
						}
						cancel()
					}
				}()
			}
			wg.Wait()
			t.Logf("%s: %d requests, %d cut short by their client, %d reached the backend, in %v", name, n, cancelled, atomic.LoadInt64(&b.served), time.Since(start).Round(time.Millisecond))
			deadline := time.Now().Add(2 * time.Second) // the last handlers return after their clients left
			held := st.held(t)
			for held != 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				held = st.held(t)
			}
			if held != 0 {
				t.Errorf("%d slots held after every request ended", held)
			}
			if got := concurrently(t, urls, k); got[200] != k {
				t.Errorf("%d concurrent requests after the flood: %v, want all 200 (a slot leaked)", k, got)
			}
		})
	}
}

// heldSlots counts the in-flight slots held in every pooled memory store.
func heldSlots(t *testing.T) int {
	n := 0
	stores.Range(func(key, value any) bool {
		if ms, ok := value.(*pooledStore).store.(*core.MemoryStore); ok {
			n += ms.InFlight()
		}
		return true
	})
	return n
}

// TestInFlightLeaseTTL checks the default time to live of the Redis
// leases: the server's write_timeout and 5 s, else core's default.
func TestInFlightLeaseTTL(t *testing.T) {
	h := &Handler{Store: &StoreConfig{Redis: &RedisStoreConfig{}}}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	if got := h.leaseTTL(ctx); got != core.DefaultLeaseTTL {
		t.Errorf("without a server: %v, want %v", got, core.DefaultLeaseTTL)
	}
	h.Store.Redis.LeaseTTL = caddy.Duration(7 * time.Second)
	if got := h.leaseTTL(ctx); got != 7*time.Second {
		t.Errorf("lease_ttl 7s: %v", got)
	}
}

// TestAdminInFlight reads, through the admin API, the requests in progress
// of a zone limiting them only: two slow requests hold two of its three
// slots, and once they end none is held.
func TestAdminInFlight(t *testing.T) {
	for name, store := range flightStores(t) {
		t.Run(name, func(t *testing.T) {
			st := store()
			b := newSlowBackend(t, 10*time.Second)
			p := freePorts(t, 1)
			urls, api := loadWithAdmin(t, slowServer(t, p[0], map[string]any{
				"zones": []any{map[string]any{"name": "conc", "key": "all", "max_in_flight": 3}},
				"store": st.json,
			}))
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			for i := 0; i < 2; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, urls[0], nil)
					if resp, err := http.DefaultClient.Do(req); err == nil {
						resp.Body.Close()
					}
				}()
			}
			deadline := time.Now().Add(5 * time.Second)
			for atomic.LoadInt64(&b.inside) < 2 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			var zones zonesAnswer
			api.mustCall("GET", "/sluice/zones", &zones)
			if len(zones.Zones) != 1 || zones.Zones[0].MaxInFlight != 3 {
				t.Errorf("zones: %+v, want one with max_in_flight 3", zones)
			}
			var k keyAnswer
			api.mustCall("GET", "/sluice/zones/conc/keys/all", &k)
			if !k.Present || k.InFlight == nil || *k.InFlight != 2 || *k.Remaining != 1 || k.Capacity != nil {
				t.Errorf("with two requests in progress: %v, want 2 in flight, 1 remaining", k)
			}
			cancel()
			wg.Wait()
			for st.held(t) > 0 && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			api.mustCall("GET", "/sluice/zones/conc/keys/all", &k)
			if k.Present || *k.InFlight != 0 || *k.Remaining != 3 {
				t.Errorf("once they ended: %v, want none in flight", k)
			}
		})
	}
}
