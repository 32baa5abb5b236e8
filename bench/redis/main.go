// Command redis measures the decisions per second of sluice's redisstore.Store
// (through core/resp) against a running Redis server, at several numbers of
// concurrent callers. With -pool 0 (the default) each caller has its own
// connection, so that every decision is one round trip; with -pool N the
// callers share N connections, and the decisions that find them all busy
// are batched (see core/resp). It decides one
// token_bucket limit of 1e9 per second with a burst of 1e9 on one key, so
// that every decision is admitted and writes its state.
//
//	go run ./bench/redis -addr 127.0.0.1:6379 -c 1,8,64 -d 3s
//
// prints one line per concurrency, "<callers> <decisions/s> <p99 ms> <PING
// p99 ms>": the decisions per second, the 99th percentile of one
// decision's latency (of the first maxSamples decisions of each caller),
// and that of a PING sent to the same server under the same load, one
// after the other on a connection of its own, from the same process: what
// the server, the network and the process's scheduling add to any command
// then, beside which a decision's latency shows what the decision itself
// adds (its script, its client's work and, with -pool, its wait for a
// shared connection). With -dump
// DIR it first writes the store's script to DIR/script.lua and the EVALSHA
// arguments of one decision, one per line, to DIR/evalsha.args, so that
// redis-benchmark can send exactly the same command (see run.sh).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/resp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6379", "Redis server address")
	conc := flag.String("c", "1,8,64", "comma-separated numbers of concurrent callers")
	dur := flag.Duration("d", 3*time.Second, "duration of each measurement")
	pool := flag.Int("pool", 0, "connections the callers share; 0 for one per caller")
	dump := flag.String("dump", "", "directory to write script.lua and evalsha.args to, before measuring")
	cpuprofile := flag.String("cpuprofile", "", "file to write a CPU profile of the measurements to")
	flag.Parse()
	if *cpuprofile != "" {
		f, err := os.Create(*cpuprofile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench/redis:", err)
			os.Exit(1)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*addr, *conc, *pool, *dur, *dump); err != nil {
		fmt.Fprintln(os.Stderr, "bench/redis:", err)
		os.Exit(1)
	}
}

func run(addr, conc string, pool int, dur time.Duration, dump string) error {
	limit := &model.Limit{Name: "bench", Rate: model.Rate{Quota: 1e9, Period: time.Second}}
	if err := limit.Validate(); err != nil {
		return err
	}
	asks := []model.Ask{{Limit: limit, Key: "bench", Cost: 1}}
	if dump != "" {
		if err := dumpCommand(addr, asks, dump); err != nil {
			return err
		}
	}
	for _, f := range strings.Split(conc, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return fmt.Errorf("-c: bad concurrency %q", f)
		}
		size := pool
		if size == 0 {
			size = n
		}
		rate, p99, ping, err := measure(addr, asks, n, size, dur)
		if err != nil {
			return err
		}
		fmt.Printf("%d %.0f %.3f %.3f\n", n, rate, float64(p99)/float64(time.Millisecond), float64(ping)/float64(time.Millisecond))
	}
	return nil
}

// maxSamples bounds the latencies each caller keeps, and so the memory
// a measurement takes.
const maxSamples = 1 << 18

// measure runs callers goroutines deciding asks in a loop for dur and
// returns the decisions per second, the 99th percentile of a decision's
// latency and that of a PING sent meanwhile (see probe).
func measure(addr string, asks []model.Ask, callers, pool int, dur time.Duration) (float64, time.Duration, time.Duration, error) {
	ctx, cancel := context.WithTimeout(context.Background(), dur+10*time.Second)
	defer cancel()
	client, err := resp.New(ctx, resp.Options{Addr: addr, PoolSize: pool})
	if err != nil {
		return 0, 0, 0, err
	}
	defer client.Close()
	pinger, err := resp.New(ctx, resp.Options{Addr: addr, PoolSize: 1})
	if err != nil {
		return 0, 0, 0, err
	}
	defer pinger.Close()
	store, err := redisstore.New(redisstore.Config{Client: client})
	if err != nil {
		return 0, 0, 0, err
	}
	// Warm up: load the script and open every connection.
	if err := store.Take(ctx, asks, make([]model.Decision, len(asks))); err != nil {
		return 0, 0, 0, err
	}
	if _, err := pinger.Do(ctx, "PING"); err != nil {
		return 0, 0, 0, err
	}
	samples := make([][]time.Duration, callers)
	var done, failed int64
	var firstErr atomic.Value
	var stop int32
	var wg sync.WaitGroup
	began := time.Now()
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			out := make([]model.Decision, len(asks))
			lat := make([]time.Duration, 0, 4096)
			for atomic.LoadInt32(&stop) == 0 {
				t0 := time.Now()
				if err := store.Take(ctx, asks, out); err != nil {
					if atomic.AddInt64(&failed, 1) == 1 {
						firstErr.Store(err)
					}
					return
				}
				if len(lat) < maxSamples {
					lat = append(lat, time.Since(t0))
				}
				atomic.AddInt64(&done, 1)
			}
			samples[i] = lat
		}(i)
	}
	pings, perr := probe(ctx, pinger, dur)
	atomic.StoreInt32(&stop, 1)
	wg.Wait()
	elapsed := time.Since(began)
	if failed > 0 {
		return 0, 0, 0, fmt.Errorf("%d callers failed: %v", failed, firstErr.Load())
	}
	if perr != nil {
		return 0, 0, 0, perr
	}
	var all []time.Duration
	for _, s := range samples {
		all = append(all, s...)
	}
	if len(all) == 0 || len(pings) == 0 {
		return 0, 0, 0, fmt.Errorf("no decision or no PING in %v", dur)
	}
	return float64(done) / elapsed.Seconds(), p99(all), p99(pings), nil
}

// probe sends PINGs on c for dur, one after the other as each caller sends
// its decisions, and returns each one's round trip: the latency of the
// server's plainest command under the callers' load. (A PING every
// millisecond instead measured the wake-up of an idle processor of this
// virtual machine, up to twice a decision's p99 at one caller.)
func probe(ctx context.Context, c *resp.Client, dur time.Duration) ([]time.Duration, error) {
	var lat []time.Duration
	for end := time.Now().Add(dur); time.Now().Before(end); {
		t0 := time.Now()
		if _, err := c.Do(ctx, "PING"); err != nil {
			return nil, fmt.Errorf("PING under load: %w", err)
		}
		lat = append(lat, time.Since(t0))
	}
	return lat, nil
}

// p99 returns the 99th percentile of xs, which it sorts.
func p99(xs []time.Duration) time.Duration {
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	return xs[len(xs)*99/100]
}

// recorder is a Scripter that remembers the last script loaded and the
// last EVALSHA sent through it.
type recorder struct {
	model.Scripter
	script string
	call   []string
}

func (r *recorder) EvalSha(ctx context.Context, sha string, keys, args []string) (interface{}, error) {
	r.call = append([]string{sha, strconv.Itoa(len(keys))}, keys...)
	r.call = append(r.call, args...)
	return r.Scripter.EvalSha(ctx, sha, keys, args)
}

func (r *recorder) ScriptLoad(ctx context.Context, script string) (string, error) {
	r.script = script
	return r.Scripter.ScriptLoad(ctx, script)
}

// dumpCommand flushes the server's scripts, makes one decision through a
// recorder (which reloads the script), and writes the script and the
// EVALSHA arguments to dir.
func dumpCommand(addr string, asks []model.Ask, dir string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client, err := resp.New(ctx, resp.Options{Addr: addr, PoolSize: 1})
	if err != nil {
		return err
	}
	defer client.Close()
	if _, err := client.Do(ctx, "SCRIPT", "FLUSH"); err != nil {
		return err
	}
	rec := &recorder{Scripter: client}
	store, err := redisstore.New(redisstore.Config{Client: rec})
	if err != nil {
		return err
	}
	if err := store.Take(ctx, asks, make([]model.Decision, len(asks))); err != nil {
		return err
	}
	if rec.script == "" || rec.call == nil {
		return fmt.Errorf("the store loaded no script")
	}
	if err := os.WriteFile(filepath.Join(dir, "script.lua"), []byte(rec.script), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "evalsha.args"), []byte(strings.Join(rec.call, "\n")+"\n"), 0o644)
}
