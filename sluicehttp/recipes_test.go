package sluicehttp_test

// The examples that docs/recipes.md and docs/go.md quote verbatim (the
// tests of package examples check that they do); those with an Output
// comment run in the tests, the others are compiled.

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/sluicehttp"
)

// send sends one request to h and returns the recorded answer.
func send(h http.Handler, method, path, client string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	r.RemoteAddr = client + ":40000"
	for i := 0; i+1 < len(header); i += 2 {
		r.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// yourHandler is the service the recipes protect.
var yourHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	fmt.Fprintln(w, "ok")
})

// yourLogin is the login handler the login recipe protects: 200 for the
// password "right", 401 for any other.
var yourLogin = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	if r.Header.Get("Password") != "right" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	fmt.Fprintln(w, "welcome")
})

// Each client may fail to log in 5 times in any minute; the 6th attempt is
// answered 429, and the client is then refused for 15 minutes. Successful
// logins are not counted.
func Example_login() {
	mw, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{
			Name:        "login",
			Match:       func(r *http.Request) bool { return r.URL.Path == "/login" },
			Algorithm:   "sliding_window_log", // exact over any 60 s
			Rate:        "5/min",
			CountStatus: []string{"401", "403", "429"}, // only failed attempts count
			Penalty:     15 * time.Minute,              // a refused client is held out from the refusal
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	h := mw.Handler(yourLogin)

	admitted := 0
	for i := 0; i < 20; i++ {
		if send(h, "POST", "/login", "192.0.2.1", "Password", "right").Code == 200 {
			admitted++
		}
	}
	fmt.Println("successful logins admitted:", admitted, "of 20")
	var w *httptest.ResponseRecorder
	for i := 0; i < 6; i++ {
		w = send(h, "POST", "/login", "192.0.2.1", "Password", "wrong")
		fmt.Print(w.Code, " ")
	}
	fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
	// Output:
	// successful logins admitted: 20 of 20
	// 401 401 401 401 401 429 Retry-After: 900
}

// yourLLM is the LLM API the token recipe protects: every answer says it
// used 4,000 tokens.
var yourLLM = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Tokens-Used", "4000")
	fmt.Fprintln(w, "{...}")
})

// Each API key may spend 10,000 tokens a minute, as the upstream counts
// them in the X-Tokens-Used header of its answers: a key's request is let
// through while the key has tokens left, and charged what its answer says
// it cost.
func Example_tokens() {
	mw, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{
			Name:       "tokens",
			Key:        []string{"header:Authorization"}, // or header:X-Api-Key
			Rate:       "10000/min",
			CostHeader: "X-Tokens-Used", // charged when the answer comes, nothing before
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	h := mw.Handler(yourLLM)

	var w *httptest.ResponseRecorder
	for i := 0; i < 4; i++ {
		w = send(h, "POST", "/v1/chat/completions", "192.0.2.1", "Authorization", "Bearer k-1")
		fmt.Print(w.Code, " ")
	}
	fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
	w = send(h, "POST", "/v1/chat/completions", "192.0.2.1", "Authorization", "Bearer k-2")
	fmt.Println("another key:", w.Code)
	// Output:
	// 200 200 200 429 Retry-After: 12
	// another key: 200
}

// yourFiles is the file server the download recipe protects: every file
// is 4 MB.
var yourFiles = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Write(make([]byte, 4000000))
})

// Each client may download 10 MB a minute from /files/: the cost of an
// answer is the bytes of its body.
func Example_downloads() {
	mw, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{
			Name:      "downloads",
			Match:     func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/files/") },
			Rate:      "10000000/min",
			CostBytes: true, // charged once the body is sent
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	h := mw.Handler(yourFiles)

	var w *httptest.ResponseRecorder
	for i := 0; i < 4; i++ {
		w = send(h, "GET", "/files/a.iso", "192.0.2.1")
		fmt.Print(w.Code, " ")
	}
	fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
	// Output: 200 200 200 429 Retry-After: 12
}

// Each API key may make 1,000 requests a day: a window per UTC day, not a
// bucket that refills as it drains. Requests without the header are not
// counted (OnMissingKey "skip"): refuse them in the handler, or set
// OnMissingKey "shared" to count them together.
func Example_apiKeyQuota() {
	mw, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{
			Name:      "daily",
			Key:       []string{"header:X-API-Key"},
			Algorithm: "fixed_window",
			Rate:      "1000/day",
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	h := mw.Handler(yourHandler)

	w := send(h, "GET", "/api/items", "192.0.2.1", "X-API-Key", "k-123")
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"))
	// Output: 200 "daily";q=1000;w=86400
}

// /reports/ is expensive: 10 requests in any minute for all clients
// together, and at most 2 at once.
func Example_globalLimit() {
	mw, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{
			Name:        "reports",
			Match:       func(r *http.Request) bool { return strings.HasPrefix(r.URL.Path, "/reports/") },
			Key:         []string{"const:global"}, // one counter for every request
			Algorithm:   "sliding_window_log",     // at most 10 in any 60 s
			Rate:        "10/min",
			MaxInFlight: 2,
		}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	h := mw.Handler(yourHandler)

	var w *httptest.ResponseRecorder
	for i := 0; i < 11; i++ {
		client := fmt.Sprintf("192.0.2.%d", i+1) // eleven clients, one limit
		w = send(h, "GET", "/reports/q3", client)
		fmt.Print(w.Code, " ")
	}
	fmt.Println("Retry-After:", w.Header().Get("Retry-After"))
	// Output: 200 200 200 200 200 200 200 200 200 200 429 Retry-After: 60
}

// Every replica of the service counts each client once, in Redis; while
// Redis is unreachable, each of the three enforces a third of the limit in
// its own memory.
func Example_threeInstances() {
	mw, err := sluicehttp.New(sluicehttp.Config{
		Limits:    []sluicehttp.Limit{{Name: "per_client", Rate: "100/min"}},
		Redis:     &sluicehttp.Redis{Addr: "localhost:6379"},
		Fallback:  "local",
		Instances: 3,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	log.Fatal(http.ListenAndServe(":8080", mw.Handler(yourHandler)))
}

// Your own answer to a refused request: sluice sets Retry-After and the
// rate-limit headers, Limited writes the status and the body.
func Example_custom429() {
	mw, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "per_client", Rate: "100/min"}},
		Limited: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(http.StatusTooManyRequests)
			fmt.Fprint(w, "<h1>Slow down</h1><p>Too many requests: try again in a moment.</p>")
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	h := mw.Handler(yourHandler)

	var w *httptest.ResponseRecorder
	for i := 0; i < 101; i++ {
		w = send(h, "GET", "/", "192.0.2.1")
	}
	fmt.Println(w.Code, w.Header().Get("Retry-After"), w.Header().Get("RateLimit-Policy"))
	fmt.Println(w.Body.String())
	// Output:
	// 429 1 "per_client";q=100;w=60
	// <h1>Slow down</h1><p>Too many requests: try again in a moment.</p>
}

// Observe a new, stricter limit before enforcing it: the enforced
// middleware answers as usual; the candidate, in dry run, refuses nothing
// and reports what it would have refused to OnVerdict.
func Example_dryRun() {
	enforced, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "per_client", Rate: "100/min"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer enforced.Close()
	var wouldRefuse atomic.Int64 // OnVerdict runs in every request's goroutine
	candidate, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "candidate", Rate: "30/min"}},
		Mode:   "dry_run",
		OnVerdict: func(r *http.Request, v core.Verdict) {
			if v.Outcome == core.OutcomeDryRunRejected {
				wouldRefuse.Add(1) // or log it, or count it in your metrics
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer candidate.Close()
	h := enforced.Handler(candidate.Handler(yourHandler))

	refused := 0
	for i := 0; i < 40; i++ {
		if send(h, "GET", "/", "192.0.2.1").Code == http.StatusTooManyRequests {
			refused++
		}
	}
	fmt.Println("refused:", refused, "the candidate would have refused:", wouldRefuse.Load())
	// Output: refused: 0 the candidate would have refused: 10
}

// Counters in Redis: every replica of the service counts on them. While
// Redis fails, each of three replicas decides in its own memory with a
// third of each limit.
func Example_redis() {
	mw, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "api", Rate: "100/min"}},
		Redis: &sluicehttp.Redis{
			Addr:     "redis.internal:6379",
			Password: os.Getenv("REDIS_PASSWORD"),
			Timeout:  50 * time.Millisecond,
		},
		Fallback:  "local",
		Instances: 3,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	log.Fatal(http.ListenAndServe(":8080", mw.Handler(yourHandler)))
}

// OnVerdict sees every decided request, for logs and metrics.
func Example_onVerdict() {
	mw, err := sluicehttp.New(sluicehttp.Config{
		Limits: []sluicehttp.Limit{{Name: "api", Rate: "1/min"}},
		OnVerdict: func(r *http.Request, v core.Verdict) {
			if v.Outcome == core.OutcomeRejected {
				fmt.Printf("429 %s %s: limit %s\n", r.Method, r.URL.Path, v.Decision.Limit.Name)
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer mw.Close()
	h := mw.Handler(yourHandler)

	send(h, "GET", "/items", "192.0.2.1")
	send(h, "GET", "/items", "192.0.2.1")
	// Output: 429 GET /items: limit api
}
