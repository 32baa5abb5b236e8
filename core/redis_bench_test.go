package core

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/resp"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// benchRedisGate returns a Gate on a real redis-server as the Traefik
// plugin builds it (a redisstore.Store whose redisstore.Direct holds the RESP client,
// a breaker, a timeout) and a token bucket it never rejects.
func benchRedisGate(b *testing.B) (*Gate, *model.Limit) {
	b.Helper()
	srv := redistest.Start(b, redistest.Options{})
	client, err := resp.New(context.Background(), resp.Options{Addr: srv.Addr})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Close() })
	direct := &redisstore.Direct{}
	direct.Set(client)
	s, err := redisstore.New(redisstore.Config{Client: client, Direct: direct})
	if err != nil {
		b.Fatal(err)
	}
	l := coretest.Limit(b, "t", model.TokenBucket, "1e9/s", 1e12, 0)
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: s, Responder: answer.Responder{Headers: answer.DefaultHeaders},
		Breaker: &Breaker{}, Timeout: redisstore.DefaultTimeout})
	if err != nil {
		b.Fatal(err)
	}
	return g, l
}

// BenchmarkRedisDecide measures a Gate's common decision on Redis: one
// ask of cost 1 sent straight to the RESP client, the round trip
// included.
func BenchmarkRedisDecide(b *testing.B) {
	g, l := benchRedisGate(b)
	asks := []model.Ask{{Limit: l, Key: "192.0.2.1", Cost: 1}}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if v := g.Decide(ctx, asks); v.Outcome != OutcomeAllowed {
			b.Fatalf("verdict %+v", v)
		}
	}
}

// BenchmarkRedisServeLane measures an allowed request through a Lane on
// Redis as the Traefik plugin builds it (an IPv4 peer's key, a watching
// observer): key, decision, headers.
func BenchmarkRedisServeLane(b *testing.B) {
	g, l := benchRedisGate(b)
	spec, err := keyspec.Parse(nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	lane := NewLane(LaneConfig{Gate: g, Asks: []LaneAsk{{Limit: l, Cost: 1}}, Specs: []*keyspec.Spec{spec}, Prefix: "bench\x00",
		Observe: func(v *Verdict) {
			if v.Outcome != OutcomeAllowed || v.Err != nil {
				b.Fatalf("verdict %+v", v)
			}
		}, Watch: true})
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "192.0.2.1:1234"
	w := &coretest.DiscardWriter{H: http.Header{}}
	next := &countingHandler{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ServeLane(lane, next, w, r)
	}
	b.StopTimer()
	if next.n != b.N {
		b.Fatalf("%d requests passed on of %d", next.n, b.N)
	}
}
