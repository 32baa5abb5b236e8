package sluicehttp_test

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"github.com/sluicehq/sluice/sluicehttp"
)

// A service limits each client to 2 requests a minute, in memory. The
// third request is answered 429 (with Retry-After: 30 and a JSON body),
// with the headers Caddy and Traefik send.
func Example() {
	mw, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "api", Rate: "2/1m"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	h := mw.Handler(hello)

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
	mw, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "per_ip", Rate: "100/1m", Burst: 20}},
		Share:  "edge",
		Redis:  &sluicehttp.Redis{Addr: "127.0.0.1:6379"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	log.Fatal(http.ListenAndServe("127.0.0.1:9000", mw.Handler(http.NotFoundHandler())))
}
