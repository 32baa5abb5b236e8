// Command soak floods a limited endpoint with distinct keys while a victim
// whose quota is spent keeps asking, and reports whether the victim's
// state survived: eviction must prefer idle and expired states.
//
//	soak -url http://127.0.0.1:8080/ -keys 250000 -mode xff
//	soak -url http://127.0.0.1:8081/flood -keys 200000 -mode header -header X-API-Key
//
// With -mode xff each key is a client address sent in X-Forwarded-For
// (the server must trust the loopback peer), with -mode header a value of
// the header. The victim first spends its quota (until a 429, at most 100
// requests); then -conc workers send one request per new key, and every
// -every keys the victim sends one more, which must still be answered 429
// with X-RateLimit-Remaining 0. The flood stops after -keys keys or -max,
// whichever comes first. It prints one line of figures, prefixed PASS, or
// FAIL when the victim was let through once or a request failed. With
// -victim=false there is no victim: it only sends the keys, as to a
// process without limits that bench/rss.sh compares with one.
package main

import (
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	url := flag.String("url", "", "the limited endpoint")
	keys := flag.Int("keys", 100000, "distinct keys to send")
	mode := flag.String("mode", "xff", "xff: keys are client addresses in X-Forwarded-For; header: values of -header")
	header := flag.String("header", "X-API-Key", "the key header, with -mode header")
	conc := flag.Int("conc", 16, "concurrent workers")
	every := flag.Int("every", 2000, "keys between two requests of the victim")
	most := flag.Duration("max", 2*time.Minute, "the longest the flood may take")
	victim := flag.Bool("victim", true, "run the victim; false: only send the keys (to an unlimited endpoint, for comparison)")
	flag.Parse()
	if *url == "" {
		fmt.Fprintln(os.Stderr, "soak: -url is required")
		os.Exit(2)
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: *conc + 1}}
	key := func(i int) (string, string) {
		if *mode == "xff" {
			return "X-Forwarded-For", fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		}
		return *header, "k" + strconv.Itoa(i)
	}
	// get sends one request as key i (-1: the victim) and returns the
	// status and X-RateLimit-Remaining, or 0 when it failed.
	get := func(i int) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, *url, nil)
		name, value := key(i)
		if i < 0 { // the victim, outside the flood's keys
			if value = "victim"; *mode == "xff" {
				value = "192.0.2.1"
			}
		}
		req.Header.Set(name, value)
		resp, err := client.Do(req)
		if err != nil {
			return 0, ""
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("X-Ratelimit-Remaining")
	}

	spent := !*victim
	for n := 0; n < 100 && !spent; n++ {
		code, _ := get(-1)
		spent = code == http.StatusTooManyRequests
	}
	if !spent {
		fmt.Println("FAIL: the victim got no 429 in 100 requests")
		os.Exit(1)
	}

	var next, ok, rejected, other, victimChecks, victimLost int64
	var lost sync.Once
	lostAt := ""
	deadline := time.Now().Add(*most)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < *conc; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(atomic.AddInt64(&next, 1)) - 1
				if i >= *keys || time.Now().After(deadline) {
					return
				}
				switch code, _ := get(i); code {
				case http.StatusOK:
					atomic.AddInt64(&ok, 1)
				case http.StatusTooManyRequests:
					atomic.AddInt64(&rejected, 1)
				default:
					atomic.AddInt64(&other, 1)
				}
				if *victim && i%*every == 0 {
					atomic.AddInt64(&victimChecks, 1)
					if code, rem := get(-1); code != http.StatusTooManyRequests || rem != "0" {
						atomic.AddInt64(&victimLost, 1)
						lost.Do(func() { lostAt = fmt.Sprintf(" (first at key %d: %d, remaining %q)", i, code, rem) })
					}
				}
			}
		}()
	}
	wg.Wait()
	el := time.Since(start)
	sent := ok + rejected + other
	status := "PASS"
	if victimLost > 0 || other > 0 {
		status = "FAIL"
	}
	cut := ""
	if sent < int64(*keys) {
		cut = fmt.Sprintf(" (stopped by -max %v)", *most)
	}
	fmt.Printf("%s: %d distinct keys in %.1f s (%.0f/s)%s: %d × 200, %d × 429, %d other; the victim, spent before, answered 429 with 0 remaining %d of %d times%s\n",
		status, sent, el.Seconds(), float64(sent)/el.Seconds(), cut, ok, rejected, other, victimChecks-victimLost, victimChecks, lostAt)
	if status != "PASS" {
		os.Exit(1)
	}
}
