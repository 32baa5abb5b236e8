// Command backend is the upstream of the end-to-end tests and benchmarks: a
// loopback HTTP server that answers every request with 200 and the body
// "ok", as fast as net/http allows. It echoes the request header
// X-Sluice-Dry-Run, the plugin's dry-run mark, as the response header
// X-Seen-Dry-Run, so that a test sees what reached the upstream. A query
// "sleep=<duration>" holds the request that long first, or until its
// client leaves: a slow upstream for the in-flight tests. A query
// "status=<code>" (200 to 599) answers with that status instead of 200,
// as a login answers 401 to a wrong password. A query "tokens=<n>" answers
// with the header X-Tokens-Used: <n>, as an LLM API says what a request
// cost, and "bytes=<n>" (at most 1 GiB) with a body of n bytes instead of
// "ok", as a download. A query "events=<n>" (at most 1,000) streams n
// server-sent events instead, each flushed as it is written, one every
// "every=<duration>" (default 100ms), as a streamed completion: with
// "tokens=<n>", X-Tokens-Used comes as a trailer after the last event,
// when a stream knows what it cost, or in the header with "at=start";
// with "cut=1" the backend breaks the stream off after its first event,
// as an upstream that fails in the middle of a body.
//
// A request whose path starts with /count/ is counted, per path: the
// instant it arrived (at most 100,000 per path are kept) and how many
// requests of the path are in progress, whose peak is kept. GET
// /_counts?path=/count/x answers those of /count/x as JSON:
//
//	{"arrivals":[<Unix nanoseconds>, ...],"in_flight":0,"peak":4}
//
// so that a test sees how many requests reached the upstream in any window
// (e2e/shaping.sh) and how many were there at once (e2e/outage.sh). Other
// paths are not counted and cost nothing more. The answer also lists the
// backend's stalls, "stalls":[[<Unix nanoseconds>, <nanoseconds>], ...]:
// the times a 5 ms sleep of its overslept by 30 ms or more (the last
// 10,000), in which the arrivals it records bunch together
// (e2e/promises allows for them).
//
//	go run ./e2e/backend -addr 127.0.0.1:18081
//
// It serves until it is killed.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// maxArrivals bounds the arrivals kept per counted path.
const maxArrivals = 100000

// counts is what the backend saw of one counted path.
type counts struct {
	Arrivals []int64    `json:"arrivals"`  // Unix nanoseconds, in order of arrival
	InFlight int        `json:"in_flight"` // requests in progress now
	Peak     int        `json:"peak"`      // the most in progress at once
	Stalls   [][2]int64 `json:"stalls"`    // the backend's stalls: start (Unix nanoseconds), length
}

// maxStalls bounds the stalls kept.
const maxStalls = 10000

// watchStalls records in c the times a 5 ms sleep overslept by 30 ms or
// more, forever.
func (c *counter) watchStalls() {
	for {
		t0 := time.Now()
		time.Sleep(5 * time.Millisecond)
		if d := time.Since(t0) - 5*time.Millisecond; d >= 30*time.Millisecond {
			c.mu.Lock()
			if len(c.stalls) == maxStalls {
				c.stalls = c.stalls[1:]
			}
			c.stalls = append(c.stalls, [2]int64{t0.UnixNano(), int64(d)})
			c.mu.Unlock()
		}
	}
}

// counter holds the counts of every counted path.
type counter struct {
	mu     sync.Mutex
	byPath map[string]*counts
	stalls [][2]int64
}

// enter counts the arrival of a request for path, which is in progress
// until leave.
func (c *counter) enter(path string) {
	now := time.Now().UnixNano()
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.byPath[path]
	if p == nil {
		p = &counts{Arrivals: []int64{}}
		c.byPath[path] = p
	}
	if len(p.Arrivals) < maxArrivals {
		p.Arrivals = append(p.Arrivals, now)
	}
	p.InFlight++
	if p.InFlight > p.Peak {
		p.Peak = p.InFlight
	}
}

// leave ends a request that enter counted.
func (c *counter) leave(path string) {
	c.mu.Lock()
	c.byPath[path].InFlight--
	c.mu.Unlock()
}

// serveCounts answers GET /_counts?path=P with the counts of P as JSON.
func (c *counter) serveCounts(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	p := counts{Arrivals: []int64{}}
	if q := c.byPath[r.URL.Query().Get("path")]; q != nil {
		p = *q
		p.Arrivals = append([]int64(nil), q.Arrivals...)
	}
	p.Stalls = append([][2]int64{}, c.stalls...)
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(p)
}

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
	chunk := make([]byte, 32<<10) // of a bytes=<n> body
	for i := range chunk {
		chunk[i] = 'x'
	}
	c := &counter{byPath: make(map[string]*counts)}
	go c.watchStalls()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/count/") {
			c.enter(r.URL.Path)
			defer c.leave(r.URL.Path)
		} else if r.URL.Path == "/_counts" {
			c.serveCounts(w, r)
			return
		}
		hdr := w.Header()
		hdr["Content-Type"] = []string{"text/plain; charset=utf-8"}
		if v := r.Header.Get("X-Sluice-Dry-Run"); v != "" {
			hdr["X-Seen-Dry-Run"] = []string{v}
		}
		if r.URL.RawQuery != "" {
			q := r.URL.Query()
			if d, err := time.ParseDuration(q.Get("sleep")); err == nil {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-r.Context().Done():
					t.Stop()
				}
			}
			if n, err := strconv.Atoi(q.Get("events")); err == nil && n >= 0 && n <= 1000 {
				stream(w, r, n, q.Get("every"), q.Get("tokens"), q.Get("at") == "start", q.Get("cut") == "1")
				return
			}
			if t := q.Get("tokens"); t != "" {
				hdr["X-Tokens-Used"] = []string{t}
			}
			n, err := strconv.ParseInt(q.Get("bytes"), 10, 64)
			if err == nil && n >= 0 && n <= 1<<30 {
				hdr["Content-Length"] = []string{strconv.FormatInt(n, 10)}
			} else {
				n = -1
			}
			if code, err := strconv.Atoi(q.Get("status")); err == nil && code >= 200 && code <= 599 {
				w.WriteHeader(code)
			}
			if n >= 0 {
				for b := chunk; n > 0; n -= int64(len(b)) {
					if n < int64(len(b)) {
						b = b[:n]
					}
					if _, err := w.Write(b); err != nil {
						return
					}
				}
				return
			}
		}
		w.Write(body)
	})
	log.Fatal(http.Serve(ln, h))
}

// stream answers r with n server-sent events, flushing each, one every
// every (a duration; 100ms when it is not a positive one), with
// X-Tokens-Used: tokens when tokens is set, in the header when atStart,
// else as a trailer after the last event. It stops when r's client
// leaves, and breaks the connection off after the first event when cut.
func stream(w http.ResponseWriter, r *http.Request, n int, every, tokens string, atStart, cut bool) {
	d, err := time.ParseDuration(every)
	if err != nil || d <= 0 {
		d = 100 * time.Millisecond
	}
	hdr := w.Header()
	hdr["Content-Type"] = []string{"text/event-stream"}
	hdr["Cache-Control"] = []string{"no-cache"}
	switch {
	case tokens == "":
	case atStart:
		hdr["X-Tokens-Used"] = []string{tokens}
		tokens = ""
	default:
		hdr["Trailer"] = []string{"X-Tokens-Used"}
	}
	rc := http.NewResponseController(w)
	t := time.NewTicker(d)
	defer t.Stop()
	for i := 0; i < n; i++ {
		if i > 0 {
			select {
			case <-t.C:
			case <-r.Context().Done():
				return
			}
		}
		if _, err := fmt.Fprintf(w, "data: %d\n\n", i); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
		if cut {
			panic(http.ErrAbortHandler) // net/http closes the connection mid-body
		}
	}
	if tokens != "" {
		hdr["X-Tokens-Used"] = []string{tokens}
	}
}
