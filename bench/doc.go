// Package bench compares sluice's in-memory store with the usual way of
// keying rate limiters in Go: a sync.Mutex-guarded map from key to
// *rate.Limiter (golang.org/x/time/rate), created on first sight, which is
// how Traefik's built-in rateLimit middleware keeps its buckets.
//
// It holds benchmarks only. Each workload runs as two sub-benchmarks,
// <name>/sluice and <name>/baseline, so that one run gives both:
//
//	go test -run '^$' -bench . -benchmem ./bench
//
// and compare.sh prints the ratio sluice/baseline per workload.
package bench
