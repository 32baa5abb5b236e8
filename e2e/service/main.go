// Command service is the Go service of e2e/service.sh: e2e/backend behind
// the sluicehttp middleware, with the limits of the Caddy zones in
// e2e/testdata/service.Caddyfile, in the same share group and Redis, so
// that a client's requests through Caddy and to the service count
// against one quota.
//
//	go run ./e2e/service -addr 127.0.0.1:18082 -redis 127.0.0.1:6379 \
//		-prefix sluice-e2e: -share svc -backend 127.0.0.1:18081
//
// It serves until it is killed.
package main

import (
	"flag"
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"

	"github.com/sluicehq/sluice/sluicehttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "loopback address to listen on (host:port)")
	redis := flag.String("redis", "", "host:port of the Redis server")
	prefix := flag.String("prefix", "", "the Redis key prefix (Caddy's store redis prefix)")
	share := flag.String("share", "", "the share group (Caddy's share)")
	backend := flag.String("backend", "", "host:port of the upstream (e2e/backend)")
	flag.Parse()
	mw, err := sluicehttp.New(sluicehttp.Config{
		// The zones of e2e/testdata/service.Caddyfile.
		Limits: []sluicehttp.Limit{
			{Name: "shared", Rate: "10/1h", Key: []string{"header:X-E2E-Client"}},
			{Name: "conc", MaxInFlight: 1, Key: []string{"header:X-E2E-Conc"}},
		},
		Share: *share,
		Redis: &sluicehttp.Redis{Addr: *redis, Prefix: *prefix},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	up := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: *backend})
	log.Printf("service: listening on %s", *addr)
	log.Fatal(http.ListenAndServe(*addr, mw.Handler(up)))
}
