// Command observe drives e2e/observe.sh, the "observe before enforce"
// sequence run against a real host: traffic of many clients, the advice it
// leads to, and the share of that traffic refused once a limit is enforced.
//
//	observe load -url http://127.0.0.1:8080/ -clients 40 -requests 1200 -seconds 3
//	observe load -url http://127.0.0.1:8080/,http://127.0.0.1:8081/ ...
//	observe pick -advice 'http://127.0.0.1:2019/sluice/zones/api/advice' -out advice.json -name double
//
// load sends -requests requests over -seconds from -clients clients, each
// named in the header -header, whose shares of the traffic follow Zipf's
// law (the same seed every run, so both phases of a run send the same
// trace), and prints "sent N ok A refused R" and the refused share of the
// requests. It fails on an answer other than 200 or 429. Several -url,
// separated by commas, take the requests in turn, as a balancer spreading
// every client over instances.
//
// pick fetches an advice, writes it to -out, and prints its candidate
// -name (default double, the configured limit doubled) as "<rate> <burst>
// <refused_cost>": the limit an operator reading the advice picks, and the
// share of the cost the advice says it would have refused at least.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/demand"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: observe load|pick [flags]")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "load":
		err = load(os.Args[2:])
	case "pick":
		err = pick(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "observe:", err)
		os.Exit(1)
	}
}

func load(args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	url := fs.String("url", "", "the limited endpoint, or several separated by commas, taking the requests in turn")
	header := fs.String("header", "X-Client", "the header that names the client")
	clients := fs.Int("clients", 40, "clients")
	requests := fs.Int("requests", 1200, "requests in all")
	seconds := fs.Float64("seconds", 3, "how long the trace lasts")
	fs.Parse(args)
	if *url == "" || *clients < 2 || *requests < 1 || *requests > 100000 || !(*seconds > 0 && *seconds <= 60) {
		return fmt.Errorf("load: want -url, at least 2 clients, 1 to 100000 requests over 0 to 60 seconds")
	}
	urls := strings.Split(*url, ",")
	rng := rand.New(rand.NewSource(1))
	zipf := rand.NewZipf(rng, 1.1, 1, uint64(*clients-1))
	trace := make([]int, *requests)
	for i := range trace {
		trace[i] = int(zipf.Uint64())
	}
	httpc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	var mu sync.Mutex
	counts := map[int]int{}
	var failure error
	sem := make(chan bool, 16)
	var wg sync.WaitGroup
	start := time.Now()
	gap := time.Duration(*seconds * float64(time.Second) / float64(*requests))
	for i, c := range trace {
		if d := time.Until(start.Add(time.Duration(i) * gap)); d > 0 {
			time.Sleep(d)
		}
		sem <- true
		wg.Add(1)
		go func(c int, url string) {
			defer wg.Done()
			defer func() { <-sem }()
			req, _ := http.NewRequest(http.MethodGet, url, nil)
			req.Header.Set(*header, "client-"+strconv.Itoa(c))
			res, err := httpc.Do(req)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failure = err
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			counts[res.StatusCode]++
		}(c, urls[i%len(urls)])
	}
	wg.Wait()
	if failure != nil {
		return failure
	}
	ok, refused := counts[http.StatusOK], counts[http.StatusTooManyRequests]
	if ok+refused != *requests {
		return fmt.Errorf("load: answers %v, want only 200 and 429", counts)
	}
	fmt.Printf("sent %d ok %d refused %d share %.4f\n", *requests, ok, refused, float64(refused)/float64(*requests))
	return nil
}

func pick(args []string) error {
	fs := flag.NewFlagSet("pick", flag.ExitOnError)
	url := fs.String("advice", "", "the advice endpoint")
	out := fs.String("out", "", "where to write the advice")
	name := fs.String("name", "double", "the candidate picked")
	fs.Parse(args)
	if *url == "" || *out == "" {
		return fmt.Errorf("pick: want -advice and -out")
	}
	res, err := http.Get(*url)
	if err != nil {
		return err
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("pick: %s: status %d: %s", *url, res.StatusCode, body)
	}
	var a demand.Advice
	if err := json.Unmarshal(body, &a); err != nil {
		return fmt.Errorf("pick: %s: %v", *url, err)
	}
	if a.KeyPeriods == 0 {
		return fmt.Errorf("pick: the advice has no key-period yet: %s", body)
	}
	if err := os.WriteFile(*out, body, 0o644); err != nil {
		return err
	}
	for _, c := range a.Candidates {
		if c.Name == *name {
			fmt.Printf("%s %s %.4f\n", c.Rate, strconv.FormatFloat(c.Burst, 'f', -1, 64), c.Cost.Value)
			return nil
		}
	}
	return fmt.Errorf("pick: the advice has no candidate %s: %s", *name, body)
}
