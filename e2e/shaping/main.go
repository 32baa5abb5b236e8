// Command shaping checks from outside that a shaping limit (a leaky_bucket,
// or a token bucket with max_delay) lets no more than its rate reach the
// upstream when clients hang up while it holds them (issue 20, item 2).
// Once it has opened connections with requests to -warm, it sends -first
// requests to -url, -gap apart, so that the limit queues them in that
// order; at -cancel-at it hangs up requests -cancel-from to -cancel-from +
// -cancel-n - 1 (counted from 0), which are still held; then, until -for,
// it sends one request every -feed, which keeps the queue full. Once every
// request has ended it reads from -counts (e2e/backend's /_counts for the
// endpoint's path) the instants at which the requests reached the
// upstream, and checks that no window of -window less -slack holds more
// than -most of them. The slack absorbs the scheduling jitter of a shared
// machine between the instant the limit lets a request go and its arrival
// upstream: a request late by less than the slack cannot make an exact
// schedule exceed the bound. It prints the figures and a PASS or FAIL line
// and exits non-zero on FAIL.
//
//	shaping -name leaky -url http://127.0.0.1:8080/count/leaky -warm http://127.0.0.1:8080/ \
//	    -counts 'http://127.0.0.1:9000/_counts?path=/count/leaky' -most 10
//
// Every request has a deadline (-timeout), and the load lasts -for: the
// command ends within their sum and a few seconds.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"sync"
	"time"
)

func main() {
	name := flag.String("name", "shaping", "the scenario's name, for the output")
	url := flag.String("url", "", "the limited endpoint")
	countsURL := flag.String("counts", "", "the backend's /_counts URL for the endpoint's path")
	warm := flag.String("warm", "", "a URL of the same server that no limit counts, to open connections to first")
	first := flag.Int("first", 10, "requests sent at the start, to fill the queue")
	gap := flag.Duration("gap", 10*time.Millisecond, "between the first requests, so that they queue in order")
	cancelFrom := flag.Int("cancel-from", 2, "the first of the first requests to hang up (from 0)")
	cancelN := flag.Int("cancel-n", 4, "how many of the first requests hang up")
	cancelAt := flag.Duration("cancel-at", 150*time.Millisecond, "when they hang up, from the start")
	feed := flag.Duration("feed", 20*time.Millisecond, "then one request every feed")
	during := flag.Duration("for", 2500*time.Millisecond, "until this long from the start")
	timeout := flag.Duration("timeout", 5*time.Second, "each request's deadline")
	window := flag.Duration("window", time.Second, "the limit's period")
	slack := flag.Duration("slack", 100*time.Millisecond, "the window checked is -window less this")
	most := flag.Int("most", 10, "the most requests the upstream may see in a window of -window less -slack")
	flag.Parse()
	if *url == "" || *countsURL == "" || *first < *cancelFrom+*cancelN || *slack >= *window {
		fmt.Fprintln(os.Stderr, "shaping: -url and -counts are required; the hung-up requests must be among the first; -slack must be less than -window")
		os.Exit(2)
	}

	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	// send starts a request that ends at its deadline or when ctx ends.
	send := func(ctx context.Context) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(ctx, *timeout)
			defer cancel()
			outcome := "failed"
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, *url, nil)
			if err == nil {
				var resp *http.Response
				resp, err = client.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					outcome = fmt.Sprint(resp.StatusCode)
				} else if errors.Is(err, context.Canceled) {
					outcome = "hung up"
				}
			}
			mu.Lock()
			codes[outcome]++
			mu.Unlock()
		}()
	}

	// Connections opened first, by requests to -warm, which no limit
	// counts, so that the first requests queue in the order they are sent.
	if *warm != "" {
		var ww sync.WaitGroup
		for i := 0; i < *first+*cancelN; i++ {
			ww.Add(1)
			go func() {
				defer ww.Done()
				ctx, cancel := context.WithTimeout(context.Background(), *timeout)
				defer cancel()
				req, err := http.NewRequestWithContext(ctx, http.MethodGet, *warm, nil)
				if err != nil {
					return
				}
				if resp, err := client.Do(req); err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}()
		}
		ww.Wait()
	}

	start := time.Now()
	hangUp, hang := context.WithCancel(context.Background())
	defer hang()
	for i := 0; i < *first; i++ {
		ctx := context.Background()
		if i >= *cancelFrom && i < *cancelFrom+*cancelN {
			ctx = hangUp
		}
		send(ctx)
		time.Sleep(*gap)
	}
	time.Sleep(time.Until(start.Add(*cancelAt)))
	hang()
	next := start.Add(*cancelAt + *feed)
	for time.Until(start.Add(*during)) > 0 {
		time.Sleep(time.Until(next))
		next = next.Add(*feed)
		send(context.Background())
	}
	wg.Wait()

	arrivals, err := fetch(*countsURL)
	if err != nil {
		fmt.Printf("FAIL: shaping %s: reading the upstream's counts: %v\n", *name, err)
		os.Exit(1)
	}
	checked := *window - *slack
	inPeriod, inChecked := busiest(arrivals, *window), busiest(arrivals, checked)
	var outcomes []string
	for k := range codes {
		outcomes = append(outcomes, k)
	}
	sort.Strings(outcomes)
	fmt.Printf("shaping: %s: ", *name)
	for _, k := range outcomes {
		fmt.Printf("%d × %s, ", codes[k], k)
	}
	fmt.Printf("the upstream saw %d requests: at most %d in a window of %v, %d in one of %v (bound %d)\n",
		len(arrivals), inPeriod, *window, inChecked, checked, *most)
	switch {
	case inChecked > *most:
		fmt.Printf("FAIL: shaping %s: %d requests reached the upstream within %v, more than %d\n", *name, inChecked, checked, *most)
	case codes["hung up"] != *cancelN:
		fmt.Printf("FAIL: shaping %s: %d requests hung up while held, want %d (were they answered before %v?)\n", *name, codes["hung up"], *cancelN, *cancelAt)
	case codes["200"] != len(arrivals):
		fmt.Printf("FAIL: shaping %s: %d answered 200 but the upstream saw %d\n", *name, codes["200"], len(arrivals))
	case codes["429"] == 0:
		fmt.Printf("FAIL: shaping %s: no request answered 429: the load did not keep the queue full\n", *name)
	default:
		fmt.Printf("PASS: shaping %s: with %d clients hanging up while held, at most %d requests reached the upstream in any %v (bound %d)\n", *name, *cancelN, inChecked, checked, *most)
		return
	}
	os.Exit(1)
}

// fetch reads the arrivals e2e/backend's /_counts answers, in order.
func fetch(url string) ([]int64, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("status %d", resp.StatusCode)
	}
	var c struct {
		Arrivals []int64 `json:"arrivals"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil {
		return nil, err
	}
	sort.Slice(c.Arrivals, func(i, j int) bool { return c.Arrivals[i] < c.Arrivals[j] })
	return c.Arrivals, nil
}

// busiest is the most of the sorted instants ts in any window [t, t+w).
func busiest(ts []int64, w time.Duration) int {
	most, j := 0, 0
	for i := range ts {
		for j < len(ts) && ts[j] < ts[i]+int64(w) {
			j++
		}
		if j-i > most {
			most = j - i
		}
	}
	return most
}
