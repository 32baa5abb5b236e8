package sluicehttp

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/behaviour"
)

// TestBehaviourTable replays the behaviour table shared with the Caddy
// module and the Traefik plugin (testdata/behaviour at the top of the
// module, described in testdata/README.md): each case rendered as a
// Config, and its trace sent to the middleware on a fake clock, whose next
// handler answers each step's upstream status. The
// middleware reads a trusted proxy's X-Forwarded-For from the right, as
// the plugin does, so it replays the cases of both hosts but those of one.
func TestBehaviourTable(t *testing.T) {
	behaviour.Run(t, behaviour.SluiceHTTP, func(t *testing.T, c behaviour.Case) (http.Handler, func(int64), string) {
		cfg, err := configOf(c)
		if err != nil {
			t.Fatal(err)
		}
		m, gc, err := build(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		var now int64
		gc.Clock = func() int64 { return atomic.LoadInt64(&now) }
		if m.gate, err = core.NewGate(gc); err != nil {
			t.Fatal(err)
		}
		h := m.Handler(http.HandlerFunc(behaviour.Upstream))
		return h, func(ns int64) { atomic.StoreInt64(&now, ns) }, fmt.Sprintf("config: %+v", cfg)
	})
}

// configOf renders a case as the middleware's Config: a Limit per limit,
// the ipv6_prefix on each keyed on the client's address alone.
func configOf(c behaviour.Case) (Config, error) {
	cfg := Config{Headers: c.Headers, Body: c.Body, Mode: c.Mode, TrustedProxies: c.TrustedProxies}
	for _, l := range c.Limits {
		delay, err := optionalDuration(l.MaxDelay)
		if err != nil {
			return cfg, err
		}
		penalty, err := optionalDuration(l.Penalty)
		if err != nil {
			return cfg, err
		}
		lim := Limit{Name: l.Name, Rate: l.Rate, Burst: l.Burst, Algorithm: l.Alg(), Key: l.KeyParts(),
			OnMissingKey: l.OnMissingKey, Cost: l.Cost, MaxDelay: delay, Penalty: penalty,
			CountStatus: l.CountStatus, CostHeader: l.CostHeader, CostBytes: l.CostBytes}
		if parts := l.KeyParts(); len(parts) == 1 && parts[0] == "client_ip" {
			lim.IPv6Prefix = c.IPv6Prefix
		}
		cfg.Limits = append(cfg.Limits, lim)
	}
	return cfg, nil
}

// optionalDuration parses a case's Go duration; empty is zero.
func optionalDuration(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	return time.ParseDuration(s)
}
