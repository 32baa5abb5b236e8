// Command service is the Go service of e2e/service.sh: e2e/backend behind
// the sluicehttp middleware, with the limits of the Caddy zones in
// e2e/testdata/service.Caddyfile, configured by the same environment
// variables as that Caddyfile, so that a client's requests through Caddy
// and to the service count against one quota:
//
//	SLUICE_E2E_SERVICE_PORT   the loopback port it listens on
//	SLUICE_E2E_REDIS          host:port of the Redis server
//	SLUICE_E2E_PREFIX         the Redis key prefix (Caddy's store redis prefix)
//	SLUICE_E2E_SHARE          the share group (Caddy's share)
//	SLUICE_E2E_BACKEND        host:port of the upstream (e2e/backend)
//
// It serves until it is killed.
package main

import (
	"log"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/sluicehttp"
)

func main() {
	mw, err := sluicehttp.New(sluicehttp.Config{
		// The zones of e2e/testdata/service.Caddyfile.
		Limits: []sluicehttp.Limit{
			{Name: "shared", Rate: "10/1h", Key: []string{"header:X-E2E-Client"}},
			{Name: "conc", MaxInFlight: 1, Key: []string{"header:X-E2E-Conc"}},
		},
		Share: os.Getenv("SLUICE_E2E_SHARE"),
		// The Caddyfile's store redis, timeout included.
		Redis: &sluicehttp.Redis{Addr: os.Getenv("SLUICE_E2E_REDIS"), Prefix: os.Getenv("SLUICE_E2E_PREFIX"), Timeout: 300 * time.Millisecond},
		// A store error is logged: the test's counts hold only without.
		OnVerdict: func(r *http.Request, v core.Verdict) {
			if v.Err != nil {
				log.Printf("service: %s: %v", v.Outcome, v.Err)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	up := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: os.Getenv("SLUICE_E2E_BACKEND")})
	addr := "127.0.0.1:" + os.Getenv("SLUICE_E2E_SERVICE_PORT")
	log.Printf("service: listening on %s", addr)
	log.Fatal(http.ListenAndServe(addr, mw.Handler(up)))
}
