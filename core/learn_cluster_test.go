package core

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/resp"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
	"github.com/sluicehq/sluice/internal/testclock"
)

// TestLearnRedisCluster runs the limits that learn from the answer on a
// three-master Redis Cluster: a response's cost settled (checkSettled's
// steps, on the Cluster's script routing), a cost and a status settled in
// one answer for two limits whose keys live on different hash slots, and
// a penalty held by the master of its key.
func TestLearnRedisCluster(t *testing.T) {
	addrs := redistest.StartCluster(t, 3).Addrs
	clock := testclock.New(testclock.Epoch)
	st, err := redisstore.New(redisstore.Config{Client: resptest.Cluster(t, addrs, 4), Cluster: true, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	g, l := costGate(t, st, clock.Now, false)
	checkSettled(t, g, l, coretest.Nonce+"/settled", clock)

	// A limit of failures (401) in another hash slot than tokens'.
	tokens := coretest.Limit(t, "tokens"+coretest.Nonce, model.TokenBucket, "100/h", 100, 0)
	tokens.CostHeader = "X-Cost"
	var fails *model.Limit
	for i := 0; fails == nil; i++ {
		f := coretest.Limit(t, "fails"+strconv.Itoa(i)+coretest.Nonce, model.TokenBucket, "5/h", 5, 0)
		f.CountStatus = model.StatusSet{401}
		if err := f.Validate(); err != nil {
			t.Fatal(err)
		}
		if resp.KeySlot(st.StateKey(f, "k")) != resp.KeySlot(st.StateKey(tokens, "k")) {
			fails = f
		}
	}
	if err := tokens.Validate(); err != nil {
		t.Fatal(err)
	}
	g2, err := NewGate(GateConfig{Limits: []*model.Limit{tokens, fails}, Store: st, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	asks := []model.Ask{{Limit: tokens, Key: "k", Cost: 1}, {Limit: fails, Key: "k", Cost: 1}}
	answer := func(status int, cost string) {
		t.Helper()
		v := g2.Decide(context.Background(), asks)
		if v.Outcome != OutcomeAllowed {
			t.Fatalf("refused: %+v", v)
		}
		g2.Answered(context.Background(), asks, &v, status, http.Header{"X-Cost": {cost}}, 0)
	}
	answer(200, "30") // tokens: 30 charged; fails: given back
	answer(401, "5")  // tokens: 5 more; fails: 1
	if rem, _ := remaining(t, g2, tokens, "k"); rem < 65-1e-3 || rem > 65+1e-3 {
		t.Errorf("tokens: %v remaining, want 65 (30 and 5 settled)", rem)
	}
	if rem, _ := remaining(t, g2, fails, "k"); rem < 4-1e-3 || rem > 4+1e-3 {
		t.Errorf("fails: %v remaining, want 4 (the 200 given back, the 401 kept)", rem)
	}

	// A penalty: a refusal holds the key out for an hour, though the
	// rate refills the limit in 36 s.
	held := coretest.Limit(t, "held"+coretest.Nonce, model.TokenBucket, "100/h", 1, 0)
	held.Penalty = time.Hour
	if err := held.Validate(); err != nil {
		t.Fatal(err)
	}
	g3, err := NewGate(GateConfig{Limits: []*model.Limit{held}, Store: st, Clock: clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	one := []model.Ask{{Limit: held, Key: "k", Cost: 1}}
	for i, want := range []Outcome{OutcomeAllowed, OutcomeRejected} {
		if v := g3.Decide(context.Background(), one); v.Outcome != want {
			t.Fatalf("request %d: %v, want %v", i+1, v.Outcome, want)
		}
	}
	clock.Advance(30 * time.Minute)
	v := g3.Decide(context.Background(), one)
	if v.Outcome != OutcomeRejected || v.Decision.RetryAfter < 29*time.Minute || v.Decision.RetryAfter > 30*time.Minute {
		t.Fatalf("30 minutes into the penalty: %v, RetryAfter %v; want a refusal for 30 minutes more", v.Outcome, v.Decision.RetryAfter)
	}
	clock.Advance(30*time.Minute + time.Second)
	if v := g3.Decide(context.Background(), one); v.Outcome != OutcomeAllowed {
		t.Fatalf("after the penalty: %v, want admitted", v.Outcome)
	}
}
