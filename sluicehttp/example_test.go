package sluicehttp_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/sluicehq/sluice/sluicehttp"
)

// A service limits each client to 2 requests a minute, in memory. The
// third request is answered 429 (with Retry-After: 30 and a JSON body),
// with the headers Caddy and Traefik send.
func Example() {
	lim, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "api", Rate: "2/1m"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	h := lim.Handler(hello)

	for i := 0; i < 3; i++ {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "192.0.2.1:40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "api";q=2;w=60 "api";r=1;t=30
	// 200 "api";q=2;w=60 "api";r=0;t=30
	// 429 "api";q=2;w=60 "api";r=0;t=30
}

// A service shares the limit "per_ip" with a Caddy whose sluice handler
// is in the share group "edge" and stores its counters in the same Redis:
//
//	sluice {
//		share edge
//		zone per_ip {
//			rate 100/1m
//			burst 20
//		}
//		store redis {
//			address 127.0.0.1:6379
//		}
//	}
//
// A client's requests through Caddy and to the service count on one
// bucket of 20.
func Example_shareWithCaddy() {
	lim, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "per_ip", Rate: "100/1m", Burst: 20}},
		Share:  "edge",
		Redis:  &sluicehttp.Redis{Addr: "127.0.0.1:6379"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	log.Fatal(http.ListenAndServe("127.0.0.1:9000", lim.Handler(http.NotFoundHandler())))
}

// A service limits each tenant, which its authentication handler put in
// the request's context, to 100 requests a minute, and answers the
// limited requests with a page of its own.
func Example_keyFunc() {
	type tenantKey struct{}
	lim, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{
			Name: "per_tenant", Rate: "100/1m",
			KeyFunc: func(r *http.Request) (string, bool) {
				tenant, ok := r.Context().Value(tenantKey{}).(string)
				return tenant, ok
			},
		}},
		Limited: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			d, _ := sluicehttp.DecisionOf(r)
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprintf(w, "Too many requests for your team; try again in %v.\n", d.RetryAfter.Round(time.Second))
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ctx := context.WithValue(r.Context(), tenantKey{}, r.Header.Get("X-Team"))
			next.ServeHTTP(w, r.WithContext(ctx))
		})
	}
	h := auth(lim.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))

	for i := 0; i < 101; i++ {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-Team", "blue")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			fmt.Print(w.Code, " ", w.Body.String())
		}
	}
	// Output:
	// 429 Too many requests for your team; try again in 1s.
}

// A job runner spends an API's quota of 5 calls a second per customer,
// outside HTTP: Wait blocks until the quota allows the call.
func ExampleLimiter_Wait() {
	lim, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "partner_api", Rate: "5/1s", Burst: 1}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	for i := 0; i < 3; i++ {
		if err := lim.Wait(ctx, "customer-42", 1); err != nil {
			log.Fatal(err)
		}
		// call the partner's API here
	}
	fmt.Println("3 calls paced over at least", time.Since(start) >= 390*time.Millisecond)
	// Output:
	// 3 calls paced over at least true
}

// A gRPC interceptor, a queue consumer or any other caller that has a key
// asks Take for a decision and acts on it.
func ExampleLimiter_Take() {
	lim, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "uploads", Rate: "10/1h", Algorithm: "fixed_window"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	for _, size := range []float64{4, 4, 4} {
		d, err := lim.Take(context.Background(), "user:7", size)
		if err != nil {
			log.Print(err) // Redis failed: d is the failure policy's decision
		}
		if !d.Allowed {
			fmt.Printf("refused by %s: %.0f left, retry within the hour: %v\n", d.Limit, d.Remaining, d.RetryAfter <= time.Hour)
			continue
		}
		fmt.Printf("admitted: %.0f left\n", d.Remaining)
	}
	// Output:
	// admitted: 6 left
	// admitted: 2 left
	// refused by uploads: 2 left, retry within the hour: true
}

// Allow is Take of one unit for callers that only need yes or no.
func ExampleLimiter_Allow() {
	lim, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "alerts", Rate: "2/1m"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close()
	for i := 0; i < 3; i++ {
		fmt.Println(lim.Allow(context.Background(), "pager"))
	}
	// Output:
	// true
	// true
	// false
}
