// Command backend is the upstream of the Traefik end-to-end tests and
// benchmarks: a loopback HTTP server that answers every request with 200 and
// the body "ok", as fast as net/http allows. It echoes the request header
// X-Sluice-Dry-Run, the plugin's dry-run mark, as the response header
// X-Seen-Dry-Run, so that a test sees what reached the upstream. A query
// "sleep=<duration>" holds the request that long first, or until its
// client leaves: a slow upstream for the in-flight tests.
//
//	go run ./e2e/backend -addr 127.0.0.1:18081
//
// It serves until it is killed.
package main

import (
	"flag"
	"log"
	"net"
	"net/http"
	"time"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:0", "loopback address to listen on (host:port)")
	flag.Parse()
	host, _, err := net.SplitHostPort(*addr)
	if err != nil {
		log.Fatalf("backend: -addr %q: %v", *addr, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		log.Fatalf("backend: -addr %q: not a loopback address", *addr)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatalf("backend: %v", err)
	}
	log.Printf("backend: listening on %s", ln.Addr())
	body := []byte("ok")
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr["Content-Type"] = []string{"text/plain; charset=utf-8"}
		if v := r.Header.Get("X-Sluice-Dry-Run"); v != "" {
			hdr["X-Seen-Dry-Run"] = []string{v}
		}
		if r.URL.RawQuery != "" {
			if d, err := time.ParseDuration(r.URL.Query().Get("sleep")); err == nil {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-r.Context().Done():
					t.Stop()
				}
			}
		}
		w.Write(body)
	})
	log.Fatal(http.Serve(ln, h))
}
