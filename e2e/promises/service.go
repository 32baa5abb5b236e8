package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/sluicehttp"
)

// limitOf is zone z as a sluicehttp.Limit.
func limitOf(z *zone) sluicehttp.Limit {
	l := sluicehttp.Limit{Name: z.name, Burst: z.burst, Algorithm: z.alg, MaxDelay: z.maxDelay, Lease: z.lease, MaxInFlight: z.inflight}
	if z.alg != "" {
		l.Rate = z.rateText()
	}
	if z.header != "" {
		l.Key = []string{"header:" + z.header}
	} else {
		l.Key = []string{"const:g"}
	}
	return l
}

// serviceConfig is the sluicehttp configuration of route r in the Go
// service h: the limits of the Caddy zones of its share group, on Redis
// through h's proxy.
func serviceConfig(h *host, r *route) sluicehttp.Config {
	cfg := sluicehttp.Config{Share: "g", Redis: &sluicehttp.Redis{Addr: h.proxy.addr, ReadableKeys: true}}
	for _, z := range r.zones {
		cfg.Limits = append(cfg.Limits, limitOf(z))
	}
	switch r.policy {
	case "fallback":
		cfg.Fallback, cfg.Instances = "local", r.instances(h.group)
	default:
		cfg.OnStoreError = r.policy
	}
	return cfg
}

// startService serves the Go service h: every route of its group that a
// Go service has, each behind a sluicehttp middleware, answering "ok" or
// proxying to the backend.
func startService(h *host, backend string) (func(), error) {
	up := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: backend})
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux := http.NewServeMux()
	var closers []func()
	for _, r := range h.group.routes {
		if !hasRoute(h, r) {
			continue
		}
		mw, err := sluicehttp.New(serviceConfig(h, r))
		if err != nil {
			return nil, fmt.Errorf("service: route %s: %v", r.path, err)
		}
		closers = append(closers, func() { mw.Close() })
		next := http.Handler(ok)
		if r.upstream {
			next = up
		}
		mux.Handle(r.path, mw.Handler(next))
	}
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(h.port))
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	return func() {
		srv.Close()
		for _, c := range closers {
			c()
		}
	}, nil
}

// hostKinds lists the kinds of hs, for messages.
func hostKinds(hs []*host) string {
	var s []string
	for _, h := range hs {
		s = append(s, h.name)
	}
	return strings.Join(s, ",")
}
