package core

import (
	"bufio"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/resp"
	"github.com/sluicehq/sluice/internal/coretest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
)

// fakeRedis is a RESP server for tests: it answers PING with PONG and
// every other command with reply (a bulk string), or not at all when
// silent, and records the commands it received.
type fakeRedis struct {
	addr   string
	reply  string
	silent bool
	mu     sync.Mutex
	cmds   [][]string
}

func startFakeRedis(t *testing.T, reply string, silent bool) *fakeRedis {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeRedis{addr: l.Addr().String(), reply: reply, silent: silent}
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go f.serve(c)
		}
	}()
	return f
}

func (f *fakeRedis) serve(c net.Conn) {
	r := bufio.NewReader(c)
	for {
		cmd, err := readFakeCommand(r)
		if err != nil {
			return
		}
		if cmd[0] == "PING" {
			io.WriteString(c, "+PONG\r\n")
			continue
		}
		f.mu.Lock()
		f.cmds = append(f.cmds, cmd)
		f.mu.Unlock()
		if !f.silent {
			io.WriteString(c, "$"+strconv.Itoa(len(f.reply))+"\r\n"+f.reply+"\r\n")
		}
	}
}

func (f *fakeRedis) commands() [][]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([][]string(nil), f.cmds...)
}

// readFakeCommand reads an array of bulk strings.
func readFakeCommand(r *bufio.Reader) ([]string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return nil, err
	}
	if line[0] != '*' {
		return nil, errors.New("not an array: " + line)
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return nil, err
	}
	cmd := make([]string, n)
	for i := range cmd {
		if line, err = r.ReadString('\n'); err != nil {
			return nil, err
		}
		k, err := strconv.Atoi(strings.TrimSpace(line[1:]))
		if err != nil || line[0] != '$' {
			return nil, errors.New("not a bulk string: " + line)
		}
		b := make([]byte, k+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		cmd[i] = string(b[:k])
	}
	return cmd, nil
}

// directDecide decides the request keyed key, of cost, on limit l as a
// Lane on a gate of l on store answers it (with the headers ietf and x, a
// JSON body and timeout), and returns the verdict the lane observed. A
// lane of cost 1 must take serveLaneRedis' path, the only caller of the
// store's redisstore.Direct client. The client leaves once the answer's headers
// are written, so that a delayed request is cancelled, and refunded,
// rather than waited out.
func directDecide(t *testing.T, store *redisstore.Store, timeout time.Duration, l *model.Limit, key string, cost float64) Verdict {
	t.Helper()
	g, err := NewGate(GateConfig{Limits: []*model.Limit{l}, Store: store, Responder: answer.Responder{Headers: answer.DefaultHeaders, Body: answer.BodyJSON}, Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	spec, err := keyspec.Parse([]string{"header:X-Key"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var v Verdict
	lane := NewLane(LaneConfig{Gate: g, Asks: []LaneAsk{{Limit: l, Cost: cost}}, Specs: []*keyspec.Spec{spec},
		Observe: func(o *Verdict) { v = *o }, Watch: true})
	if cost == 1 && store.Direct() != nil && !lane.rd {
		t.Fatal("the lane does not take serveLaneRedis' path")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r := httptest.NewRequest("GET", "/", nil).WithContext(ctx)
	r.Header.Set("X-Key", key)
	ServeLane(lane, &countingHandler{}, &leavingWriter{rec: httptest.NewRecorder(), leave: cancel}, r)
	return v
}

// leavingWriter is a ResponseWriter whose client leaves (leave) as soon
// as the headers are written. Its methods are written out: Yaegi cannot
// find those of an embedded *httptest.ResponseRecorder.
type leavingWriter struct {
	rec   *httptest.ResponseRecorder
	leave func()
}

func (w *leavingWriter) Header() http.Header {
	w.leave()
	return w.rec.Header()
}

func (w *leavingWriter) Write(b []byte) (int, error) { return w.rec.Write(b) }

func (w *leavingWriter) WriteHeader(status int) { w.rec.WriteHeader(status) }

// TestRedisDirectCommand: the script call a Lane sends straight to the
// RESP client is the one Take sends through the Scripter, for every
// algorithm and key.
func TestRedisDirectCommand(t *testing.T) {
	f := startFakeRedis(t, "1 4 250000000 0 0 250000000", false)
	client := resptest.Client(t, f.addr, 1)
	if s := newTestRedisStore(t, client, false); s.Direct() == nil || s.Direct().Client() != client {
		t.Fatal("a store of a *resp.Client holds no direct client")
	}
	cs, _, s := directStore(t, client)
	keys := []string{"10.0.0.1", "{a}b%c}", "κλειδί", strings.Repeat("k", keyspec.MaxKeyLength)}
	for _, alg := range []model.Algorithm{model.TokenBucket, model.LeakyBucket, model.FixedWindow, model.SlidingWindowCounter, model.SlidingWindowLog} {
		l := coretest.Limit(t, "direct-"+string(alg), alg, "5/s", 0, 0)
		for _, key := range keys {
			v := directDecide(t, s, time.Second, l, key, 1)
			if v.Err != nil || !v.Decision.Allowed || v.Decision.Remaining != 4 || v.Decision.Reset != 250*time.Millisecond {
				t.Fatalf("%s %q: verdict %+v", alg, key, v)
			}
			cmds := f.commands()
			got := cmds[len(cmds)-1]
			// What Take sends through the store's Scripter, but for
			// ARGV[2]: marking only delayed admissions (see DirectTake).
			rec := &recordingScripter{reply: "1 4 250000000 0 0 250000000"}
			if err := newTestRedisStore(t, rec, false).Take(context.Background(), []model.Ask{{Limit: l, Key: key, Cost: 1}}, make([]model.Decision, 1)); err != nil {
				t.Fatal(err)
			}
			rec.args[1] = "1"
			want := append([]string{"EVALSHA", rec.sha, strconv.Itoa(len(rec.keys))}, rec.keys...)
			want = append(want, rec.args...)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s %q: sent\n%q\nwant\n%q", alg, key, got, want)
			}
		}
	}
	if n := len(f.commands()); n != 5*len(keys) || cs.evals != 0 {
		t.Errorf("%d commands, %d through Client; want %d, none", n, cs.evals, 5*len(keys))
	}
}

// TestRedisDirectTimeout: a decision sent straight to the RESP client
// fails within the gate's timeout, with the context's deadline error.
func TestRedisDirectTimeout(t *testing.T) {
	f := startFakeRedis(t, "", true)
	ctx := context.Background()
	client, err := resp.New(ctx, resp.Options{Addr: f.addr, ReadTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	s := newTestRedisStore(t, client, false)
	l := coretest.Limit(t, "direct-timeout", model.TokenBucket, "5/s", 0, 0)
	began := time.Now()
	v := directDecide(t, s, 50*time.Millisecond, l, "k", 1)
	if took := time.Since(began); took > time.Second {
		t.Errorf("decision took %v, timeout 50ms", took)
	}
	if v.Outcome != OutcomeStoreErrorAllow || !errors.Is(v.Err, context.DeadlineExceeded) || !strings.HasPrefix(v.Err.Error(), "redis: resp: EVALSHA: ") {
		t.Errorf("verdict %+v (error %v), want a store error allowed, the context's deadline", v, v.Err)
	}
}

// directStore returns a redisstore.Store whose Client counts its calls (cs) and
// runs them on client, which direct holds too.
func directStore(t *testing.T, client *resp.Client) (cs *countingEvals, direct *redisstore.Direct, s *redisstore.Store) {
	t.Helper()
	cs = &countingEvals{Scripter: client}
	direct = &redisstore.Direct{}
	direct.Set(client)
	s, err := redisstore.New(redisstore.Config{Client: cs, Direct: direct})
	if err != nil {
		t.Fatal(err)
	}
	return cs, direct, s
}

// countingEvals counts a Scripter's EvalSha and ScriptLoad calls.
type countingEvals struct {
	model.Scripter
	evals, loads int32
}

func (c *countingEvals) EvalSha(ctx context.Context, sha string, keys []string, args []string) (interface{}, error) {
	atomic.AddInt32(&c.evals, 1)
	return c.Scripter.EvalSha(ctx, sha, keys, args)
}

func (c *countingEvals) ScriptLoad(ctx context.Context, script string) (string, error) {
	atomic.AddInt32(&c.loads, 1)
	return c.Scripter.ScriptLoad(ctx, script)
}

// TestRedisDirect: a Lane's common decisions go straight to the client
// redisstore.Direct holds, deciding as Take does; the others, a decision after
// SCRIPT FLUSH, and one whose direct client is closed, go through Client.
func TestRedisDirect(t *testing.T) {
	srv := redistest.Start(t, redistest.Options{})
	client := resptest.Client(t, srv.Addr, 2)
	cs, direct, s := directStore(t, client)
	uncounted := newTestRedisStore(t, client, false)
	ctx := context.Background()
	counts := func(what string, evals, loads int32) {
		t.Helper()
		if e, l := atomic.LoadInt32(&cs.evals), atomic.LoadInt32(&cs.loads); e != evals || l != loads {
			t.Fatalf("%s: %d EvalSha and %d ScriptLoad through Client, want %d and %d", what, e, l, evals, loads)
		}
	}
	for _, alg := range []model.Algorithm{model.TokenBucket, model.LeakyBucket, model.FixedWindow, model.SlidingWindowCounter, model.SlidingWindowLog} {
		l := coretest.Limit(t, "direct-"+coretest.Nonce+string(alg), alg, "2/h", 0, 0)
		viaLane, viaTake := coretest.Nonce+"/lane", coretest.Nonce+"/take"
		for i := 0; i < 3; i++ {
			v := directDecide(t, s, time.Second, l, viaLane, 1)
			d := coretest.Take(t, s, l, viaTake, 1)
			if d.Delay > 0 { // as the lane refunds the leaving client's
				if err := uncounted.Refund(ctx, []model.Ask{{Limit: l, Key: viaTake, Cost: 1}}, []model.Decision{d}); err != nil {
					t.Fatal(err)
				}
			}
			if v.Err != nil || v.Decision.Allowed != d.Allowed || math.Abs(v.Decision.Remaining-d.Remaining) > 0.01 || v.Decision.Quota != d.Quota ||
				(v.Decision.RetryAfter == model.Never) != (d.RetryAfter == model.Never) {
				t.Errorf("%s, decision %d: lane %+v (%v), Take %+v", alg, i+1, v.Decision, v.Err, d)
			}
			// A leaky bucket's second request waits, and is refunded
			// when its client leaves, so that it admits the third too.
			if want := i < 2 || alg == model.LeakyBucket; d.Allowed != want {
				t.Errorf("%s, decision %d: allowed %v", alg, i+1, d.Allowed)
			}
		}
		for _, key := range []string{viaLane, viaTake} {
			keys, _ := s.ScriptArgs([]model.Ask{{Limit: l, Key: key, Cost: 1}})
			for _, k := range keys {
				if n, err := client.Do(ctx, "PTTL", k); err != nil || n.(int64) <= 0 {
					t.Errorf("%s: PTTL %s = %v, %v", alg, k, n, err)
				}
			}
		}
	}
	// The first decision loaded the take script; the lane refunded a
	// leaky bucket's two delayed requests, the first after loading the
	// refund script.
	const refunds = 3
	counts("decisions", 5*3+1+refunds, 2)

	l := coretest.Limit(t, "direct-"+coretest.Nonce+"-flush", model.TokenBucket, "10/s", 0, 0)
	if _, err := client.Do(ctx, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	if v := directDecide(t, s, time.Second, l, "k", 1); v.Err != nil || !v.Decision.Allowed {
		t.Fatalf("after SCRIPT FLUSH: %+v", v)
	}
	counts("after SCRIPT FLUSH", 5*3+2+refunds, 3)

	// Not the common case: through Client.
	if v := directDecide(t, s, time.Second, l, "k", 2); v.Err != nil || !v.Decision.Allowed {
		t.Fatalf("cost 2: %+v", v)
	}
	counts("cost 2", 5*3+3+refunds, 3)

	closed := resptest.Client(t, srv.Addr, 1)
	closed.Close()
	direct.Set(closed)
	if v := directDecide(t, s, time.Second, l, "k", 1); v.Err != nil || !v.Decision.Allowed {
		t.Fatalf("direct client closed: %+v", v)
	}
	counts("direct client closed", 5*3+4+refunds, 3)
	direct.Set(nil)
	if v := directDecide(t, s, time.Second, l, "k", 1); v.Err != nil || !v.Decision.Allowed {
		t.Fatalf("no direct client: %+v", v)
	}
	counts("no direct client", 5*3+5+refunds, 3)
}

// TestRedisDirectOnlyDefault: a store with another prefix, readable keys
// or a Cluster uses no direct client.
func TestRedisDirectOnlyDefault(t *testing.T) {
	for _, cfg := range []redisstore.Config{
		{Prefix: "app:"},
		{ReadableKeys: true},
		{Cluster: true},
	} {
		cfg.Client = &resp.Client{}
		cfg.Direct = &redisstore.Direct{}
		s, err := redisstore.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if s.Direct() != nil {
			t.Errorf("%+v: a direct client", cfg)
		}
	}
}

// recordingScripter answers every script call with reply and keeps the
// last one's SHA-1, KEYS and ARGV.
type recordingScripter struct {
	reply      string
	sha        string
	keys, args []string
}

func (r *recordingScripter) EvalSha(ctx context.Context, sha string, keys []string, args []string) (interface{}, error) {
	r.sha, r.keys, r.args = sha, keys, args
	return r.reply, nil
}

func (r *recordingScripter) ScriptLoad(ctx context.Context, script string) (string, error) {
	return "", errors.New("recordingScripter: no SCRIPT LOAD")
}
