package main

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/sluicehttp"
)

// limitOf is zone z as a sluicehttp.Limit.
func limitOf(z *zone) sluicehttp.Limit {
	l := sluicehttp.Limit{Name: z.name, Burst: z.burst, Algorithm: z.alg, MaxDelay: z.maxDelay, Lease: z.lease, MaxInFlight: z.inflight,
		Penalty: z.penalty, CountStatus: z.countStatus, Cost: z.cost, CostHeader: z.costHeader, CostBytes: z.costBytes}
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

// startService runs the Go service h as a process of its own (this
// program with -service-port), as a service is deployed, waits until it
// listens and returns what stops it.
func (t *topology) startService(h *host) (func(), error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	log, err := os.Create(filepath.Join(t.dir, "service.log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "-service-port", strconv.Itoa(h.port), "-service-redis", h.proxy.addr,
		"-service-instances", strconv.Itoa(len(h.group.hosts)), "-backend", t.backend)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, err
	}
	// The e2e scripts' cleanup stops what a pid file in the run's
	// directory names.
	os.WriteFile(filepath.Join(t.dir, "service.pid"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644)
	stop := func() {
		cmd.Process.Kill()
		cmd.Wait()
		log.Close()
	}
	for deadline := time.Now().Add(30 * time.Second); !dialable(h.url("")[len("http://"):]); {
		if time.Now().After(deadline) {
			return stop, fmt.Errorf("the Go service did not listen on %d within 30 s (see service.log)", h.port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return stop, nil
}

// serveService is the Go service's process: group ga's routes behind
// sluicehttp middlewares on Redis at redis, its fallback dividing by
// instances, on 127.0.0.1:port, until it is killed.
func serveService(port int, redis string, instances int, backend string) {
	g := &group{name: "ga"}
	g.routes = append(append(g.routes, routes...), defectRoutes...)
	h := &host{name: "svc", kind: "service", group: g, port: port, proxy: &proxy{addr: redis}}
	g.hosts = append(g.hosts, h)
	for len(g.hosts) < instances {
		g.hosts = append(g.hosts, &host{kind: "caddy", group: g})
	}
	if err := serve(h, backend); err != nil {
		fmt.Fprintln(os.Stderr, "service:", err)
		os.Exit(1)
	}
}

// serve serves the Go service h: every route of its group that a Go
// service has, each behind a sluicehttp middleware, answering "ok" or
// proxying to the backend.
func serve(h *host, backend string) error {
	up := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: backend})
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) })
	mux := http.NewServeMux()
	for _, r := range h.group.routes {
		if !hasRoute(h, r) {
			continue
		}
		mw, err := sluicehttp.New(serviceConfig(h, r))
		if err != nil {
			return fmt.Errorf("route %s: %v", r.path, err)
		}
		next := http.Handler(ok)
		if r.upstream {
			next = up
		}
		mux.Handle(r.path, mw.Handler(next))
	}
	return http.ListenAndServe("127.0.0.1:"+strconv.Itoa(h.port), mux)
}

// hostNames lists the names of hs, for messages.
func hostNames(hs []*host) string {
	var s []string
	for _, h := range hs {
		s = append(s, h.name)
	}
	return strings.Join(s, ",")
}
