package traefikplugin

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/internal/behaviour"
)

// TestBehaviourTable replays the behaviour table shared with the Caddy
// module (testdata/behaviour at the top of the module, described in
// testdata/README.md): each case's limits rendered as the plugin's
// options, decoded as Traefik decodes them, and its trace sent to the
// middleware on a fake clock, whose next handler answers each step's
// upstream status.
func TestBehaviourTable(t *testing.T) {
	if start != behaviour.Start*1e9 {
		t.Fatalf("the fake clocks start at %d, the table at %d s", start, behaviour.Start)
	}
	behaviour.Run(t, behaviour.Traefik, func(t *testing.T, c behaviour.Case) (http.Handler, func(int64), string) {
		opts := traefikOptions(c)
		cfg := CreateConfig()
		if err := decodeLikeTraefik(opts, cfg); err != nil {
			t.Fatalf("decode %v: %v", opts, err)
		}
		g := newTestRegistry()
		h, err := g.new(context.Background(), http.HandlerFunc(behaviour.Upstream), cfg, "behaviour-"+c.Name)
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		return h, func(ns int64) { atomic.StoreInt64(&g.clock.ns, ns) }, fmt.Sprintf("options: %v", opts)
	})
}

// traefikOptions renders a case as the plugin's options, as labels would
// carry them (every value a string, lists comma-separated): the first
// limit at the top level, the others as limits items. Items inherit
// algorithm, cost, key, onMissingKey and maxDelay from the top level,
// where Caddy's zones inherit nothing, so every item writes them.
func traefikOptions(c behaviour.Case) map[string]interface{} {
	m := map[string]interface{}{}
	var items []interface{}
	for i, l := range c.Limits {
		o := m
		if i > 0 {
			o = map[string]interface{}{}
			items = append(items, o)
		}
		o["name"] = l.Name
		o["average"] = l.Quota()
		o["period"] = l.Period()
		o["algorithm"] = l.Alg()
		if l.Burst != 0 {
			o["burst"] = behaviour.Number(l.Burst)
		}
		if l.MaxDelay != "" {
			o["maxDelay"] = l.MaxDelay
		} else if i > 0 && (l.Alg() == "token_bucket" || l.Alg() == "leaky_bucket") {
			o["maxDelay"] = "0" // a leaky_bucket's default; not the top level's
		}
		cost := l.Cost
		if cost == 0 && l.CostHeader == "" && !l.CostBytes {
			cost = 1
		}
		o["cost"] = behaviour.Number(cost)
		o["key"] = strings.Join(l.KeyParts(), ",")
		o["onMissingKey"] = l.Missing()
		if l.Penalty != "" {
			o["penalty"] = l.Penalty
		}
		if len(l.CountStatus) > 0 {
			o["countStatus"] = strings.Join(l.CountStatus, ",")
		}
		if l.CostHeader != "" {
			o["costHeader"] = l.CostHeader
		}
		if l.CostBytes {
			o["costBytes"] = "true"
		}
	}
	if len(items) > 0 {
		m["limits"] = items
	}
	if len(c.Headers) > 0 {
		m["headers"] = strings.Join(c.Headers, ",")
	}
	if c.Body != "" {
		m["body"] = c.Body
	}
	if c.Mode != "" {
		m["mode"] = c.Mode
	}
	if len(c.TrustedProxies) > 0 {
		m["trustedProxies"] = strings.Join(c.TrustedProxies, ",")
	}
	if c.IPv6Prefix != 0 {
		m["sourceCriterion"] = map[string]interface{}{
			"ipStrategy": map[string]interface{}{"ipv6Subnet": behaviour.Number(float64(c.IPv6Prefix))},
		}
	}
	return m
}
