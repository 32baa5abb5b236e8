package resp

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// newClient returns a client of addr with opts, closed by t.Cleanup.
func newClient(t *testing.T, opts Options) *Client {
	t.Helper()
	c, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New(%s): %v", opts.Addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestDo(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := newClient(t, Options{Addr: s.Addr})
	ctx := context.Background()
	steps := []struct {
		args []string
		want interface{}
		err  string // prefix of an Error reply; "" for none
	}{
		{[]string{"PING"}, "PONG", ""},
		{[]string{"SET", "k", "v"}, "OK", ""},
		{[]string{"GET", "k"}, "v", ""},
		{[]string{"GET", "missing"}, nil, ""},
		{[]string{"SET", "bin", "a\r\nb\x00c"}, "OK", ""},
		{[]string{"GET", "bin"}, "a\r\nb\x00c", ""},
		{[]string{"INCRBYFLOAT", "f", "2.5"}, "2.5", ""},
		{[]string{"INCRBYFLOAT", "f", "1"}, "3.5", ""},
		{[]string{"INCR", "n"}, int64(1), ""},
		{[]string{"RPUSH", "l", "a", "b", ""}, int64(3), ""},
		{[]string{"LRANGE", "l", "0", "-1"}, []interface{}{"a", "b", ""}, ""},
		{[]string{"LRANGE", "missing", "0", "-1"}, []interface{}{}, ""},
		{[]string{"EVAL", "return {1, 'x', {2, false}}", "0"}, []interface{}{int64(1), "x", []interface{}{int64(2), nil}}, ""},
		{[]string{"EVAL", "return {1, redis.error_reply('MY nested'), 'x'}", "0"}, nil, "MY nested"},
		{[]string{"INCR", "k"}, nil, "ERR value is not an integer"},
		{[]string{"NOSUCHCOMMAND"}, nil, "ERR unknown command"},
		{[]string{"GET", "k"}, "v", ""}, // the connection survived the error replies
	}
	for _, st := range steps {
		got, err := c.Do(ctx, st.args...)
		if st.err != "" {
			e, ok := err.(Error)
			if !ok || !strings.HasPrefix(string(e), st.err) {
				t.Errorf("%v: got (%#v, %T %v), want Error %q...", st.args, got, err, err, st.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, st.want) {
			t.Errorf("%v: got (%#v, %v), want %#v", st.args, got, err, st.want)
		}
	}
	if _, err := c.Do(ctx); err == nil {
		t.Error("Do without a command: no error")
	}
}

func TestEvalSha(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := newClient(t, Options{Addr: s.Addr})
	ctx := context.Background()
	const script = "return {#KEYS, KEYS[1], ARGV[1], tonumber(ARGV[2]) + 1}"
	sha, err := c.ScriptLoad(ctx, script)
	if err != nil || len(sha) != 40 {
		t.Fatalf("ScriptLoad: %q, %v", sha, err)
	}
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l"}
	for _, n := range []int{1, 9, 10, 12} {
		got, err := c.EvalSha(ctx, sha, keys[:n], []string{"arg", "41"})
		want := []interface{}{int64(n), "a", "arg", int64(42)}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("EvalSha with %d keys: got (%#v, %v), want %#v", n, got, err, want)
		}
	}

	if _, err := c.Do(ctx, "SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	_, err = c.EvalSha(ctx, sha, keys[:1], []string{"arg", "1"})
	if e, ok := err.(Error); !ok || !strings.HasPrefix(e.Error(), "NOSCRIPT ") {
		t.Fatalf("EvalSha after SCRIPT FLUSH: got %T %v, want Error NOSCRIPT ...", err, err)
	}
	if sha2, err := c.ScriptLoad(ctx, script); err != nil || sha2 != sha {
		t.Fatalf("ScriptLoad again: %q, %v; want %q", sha2, err, sha)
	}
	if _, err := c.EvalSha(ctx, sha, keys[:1], []string{"arg", "1"}); err != nil {
		t.Fatalf("EvalSha after reload: %v", err)
	}
}

func TestAuth(t *testing.T) {
	s := redistest.Start(t, redistest.Options{Password: "s3cret", ACLUser: "limiter", ACLPassword: "acl-pass"})
	tests := []struct {
		name     string
		user, pw string
		err      string // substring of New's error; "" for success
	}{
		{"password", "", "s3cret", ""},
		{"ACL user", "limiter", "acl-pass", ""},
		{"default user by name", "default", "s3cret", ""},
		{"wrong password", "", "nope", "resp: AUTH failed: WRONGPASS"},
		{"wrong ACL password", "limiter", "s3cret", "resp: AUTH failed: WRONGPASS"},
		{"no password", "", "", "resp: PING failed: NOAUTH"},
		{"user without password", "limiter", "", "Username without Password"},
	}
	for _, tt := range tests {
		c, err := New(context.Background(), Options{Addr: s.Addr, Username: tt.user, Password: tt.pw})
		if tt.err == "" {
			if err != nil {
				t.Errorf("%s: %v", tt.name, err)
				continue
			}
			if v, err := c.Do(context.Background(), "SET", "auth", tt.name); err != nil || v != "OK" {
				t.Errorf("%s: SET: %v, %v", tt.name, v, err)
			}
			c.Close()
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: got %v, want error containing %q", tt.name, err, tt.err)
		}
		if c != nil {
			t.Errorf("%s: client returned with error", tt.name)
		}
	}
}

func TestSelect(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	ctx := context.Background()
	c3 := newClient(t, Options{Addr: s.Addr, DB: 3})
	if _, err := c3.Do(ctx, "SET", "db", "three"); err != nil {
		t.Fatal(err)
	}
	c0 := newClient(t, Options{Addr: s.Addr})
	if v, err := c0.Do(ctx, "GET", "db"); err != nil || v != nil {
		t.Errorf("DB 0 sees DB 3's key: %#v, %v", v, err)
	}
	if v, err := c3.Do(ctx, "GET", "db"); err != nil || v != "three" {
		t.Errorf("DB 3: %#v, %v", v, err)
	}
	_, err := New(ctx, Options{Addr: s.Addr, DB: 99})
	if err == nil || !strings.Contains(err.Error(), "resp: SELECT 99 failed: ERR DB index is out of range") {
		t.Errorf("DB 99: got %v", err)
	}
}

func TestTLS(t *testing.T) {
	s := redistest.Start(t, redistest.Options{TLS: true})
	ctx := context.Background()
	c := newClient(t, Options{Addr: s.TLSAddr(), TLS: &tls.Config{RootCAs: s.CAPool()}})
	if v, err := c.Do(ctx, "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING over TLS: %#v, %v", v, err)
	}

	tests := []struct {
		name string
		opts Options
		err  string
	}{
		{"TLS to the plain port", Options{Addr: s.Addr, TLS: &tls.Config{RootCAs: s.CAPool()}, DialTimeout: 300 * time.Millisecond}, "resp: TLS handshake with " + s.Addr},
		{"TLS with an unknown CA", Options{Addr: s.TLSAddr(), TLS: &tls.Config{}}, "resp: TLS handshake with " + s.TLSAddr()},
		{"TLS to a wrong name", Options{Addr: s.TLSAddr(), TLS: &tls.Config{RootCAs: s.CAPool(), ServerName: "example.com"}}, "resp: TLS handshake"},
		{"plain to the TLS port", Options{Addr: s.TLSAddr(), ReadTimeout: 100 * time.Millisecond, WriteTimeout: 100 * time.Millisecond}, "resp: PING to " + s.TLSAddr()},
	}
	for _, tt := range tests {
		c, err := New(ctx, tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: got %v, want error containing %q", tt.name, err, tt.err)
		}
		if c != nil {
			c.Close()
		}
	}
}

func TestNewErrors(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	tests := []struct {
		name string
		opts Options
		err  string
	}{
		{"no address", Options{}, "resp: Addr"},
		{"no port", Options{Addr: "127.0.0.1"}, "resp: Addr"},
		{"negative DB", Options{Addr: closed, DB: -1}, "negative DB"},
		{"negative pool", Options{Addr: closed, PoolSize: -1}, "negative PoolSize"},
		{"negative timeout", Options{Addr: closed, ReadTimeout: -1}, "negative timeout"},
		{"connection refused", Options{Addr: closed}, "connection refused"},
	}
	for _, tt := range tests {
		c, err := New(context.Background(), tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.HasPrefix(err.Error(), "resp: ") {
			t.Errorf("%s: got %v, want error containing %q", tt.name, err, tt.err)
		}
		if c != nil {
			c.Close()
		}
	}
}

func TestTimeouts(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := newClient(t, Options{Addr: s.Addr, ReadTimeout: 50 * time.Millisecond, WriteTimeout: 50 * time.Millisecond})
	// BLPOP on an empty list blocks this connection for 5 s on the server.
	_, err := c.Do(context.Background(), "BLPOP", "empty", "5")
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("BLPOP past ReadTimeout: got %v, want a deadline error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	c2 := newClient(t, Options{Addr: s.Addr, ReadTimeout: 10 * time.Second})
	_, err = c2.Do(ctx, "BLPOP", "empty", "5")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("BLPOP past ctx deadline: got %v, want context.DeadlineExceeded", err)
	}
	// The timed-out connections were dropped; new ones serve the next calls.
	for _, cl := range []*Client{c, c2} {
		if v, err := cl.Do(context.Background(), "PING"); err != nil || v != "PONG" {
			t.Errorf("PING after a timeout: %#v, %v", v, err)
		}
	}
}

func TestServerRestart(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := newClient(t, Options{Addr: s.Addr, PoolSize: 4})
	ctx := context.Background()
	warm(t, c, 4)

	s.Stop()
	for i := 0; i < 6; i++ {
		if _, err := c.Do(ctx, "PING"); err == nil {
			t.Fatalf("call %d with the server stopped: no error", i)
		}
	}
	s.Restart(t)
	if v, err := c.Do(ctx, "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING after restart: %#v, %v", v, err)
	}

	// Idle connections left from before a restart: the first call fails,
	// its command written and maybe run for all it can tell, so not sent
	// again, and it closes the other idle connections, so the calls after
	// it succeed on new ones. The counts show the failed INCR did not run.
	warm(t, c, 4)
	s.Restart(t)
	if v, err := c.Do(ctx, "INCR", "after"); err == nil {
		t.Fatalf("INCR on a connection the server closed: %#v, no error", v)
	}
	for i := 0; i < 8; i++ {
		if v, err := c.Do(ctx, "INCR", "after"); err != nil || v != int64(i+1) {
			t.Fatalf("INCR %d after restart: %#v, %v", i, v, err)
		}
	}
}

// TestOutageDropsIdle: a dial that fails, the server being down, closes
// the idle connections from before, so that no call fails on one once the
// server is back.
func TestOutageDropsIdle(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := newClient(t, Options{Addr: s.Addr, PoolSize: 4})
	ctx := context.Background()
	// The pool's one connection goes to the back of the pool, behind the
	// entries not opened yet, which the next call takes.
	if v, err := c.Do(ctx, "PING"); err != nil || v != "PONG" {
		t.Fatalf("PING: %#v, %v", v, err)
	}
	s.Stop()
	if _, err := c.Do(ctx, "PING"); err == nil {
		t.Fatal("PING with the server stopped: no error")
	}
	s.Restart(t)
	for i := 0; i < 8; i++ {
		if v, err := c.Do(ctx, "INCR", "back"); err != nil || v != int64(i+1) {
			t.Fatalf("INCR %d after the outage: %#v, %v", i, v, err)
		}
	}
}

// hangUpServer is a server on loopback that answers PING and hangs up on
// any other command without replying, as a Redis that ran a script and
// then went down. It counts the commands it hung up on.
type hangUpServer struct {
	addr string
	mu   sync.Mutex
	cmds []string
}

func startHangUpServer(t *testing.T) *hangUpServer {
	t.Helper()
	s := &hangUpServer{}
	s.addr = serveLoopback(t, s.serve)
	return s
}

func (s *hangUpServer) serve(nc net.Conn) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	for {
		v, err := readReplyAt(br, 0, nil, nil)
		if err != nil {
			return
		}
		args, _ := v.([]interface{})
		if len(args) == 1 && args[0] == "PING" {
			nc.Write([]byte("+PONG\r\n"))
			continue
		}
		s.mu.Lock()
		s.cmds = append(s.cmds, fmt.Sprint(args))
		s.mu.Unlock()
		return // before the reply: it may have run the command
	}
}

// received returns the commands the server hung up on, in order.
func (s *hangUpServer) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.cmds...)
}

// TestNoResendAfterWrite: a command written whole to a connection that
// then ends without a reply is not sent again, on a reused connection as
// on a new one, by Do, EvalSha and Run: the call fails, once.
func TestNoResendAfterWrite(t *testing.T) {
	s := startHangUpServer(t)
	c := newClient(t, Options{Addr: s.addr, PoolSize: 2})
	ctx := context.Background()
	calls := []struct {
		name string
		call func() (interface{}, error)
	}{
		{"INCR", func() (interface{}, error) { return c.Do(ctx, "INCR", "k") }},
		{"EVALSHA", func() (interface{}, error) { return c.EvalSha(ctx, "sha", []string{"k"}, []string{"1"}) }},
		{"RUN", func() (interface{}, error) {
			return run(c, ctx, time.Now(), time.Second, "RUN", AppendCommand(nil, "INCR", "run"))
		}},
	}
	want := 0
	for _, reused := range []bool{true, false} {
		for _, cl := range calls {
			if reused {
				// An idle connection in the pool, as New left one.
				if v, err := c.Do(ctx, "PING"); err != nil || v != "PONG" {
					t.Fatalf("PING: %#v, %v", v, err)
				}
			}
			v, err := cl.call()
			if err == nil {
				t.Fatalf("%s (reused connection %v): %#v, no error", cl.name, reused, v)
			}
			want++
			if got := s.received(); len(got) != want {
				t.Fatalf("%s (reused connection %v): the server got %d commands, want %d: %q", cl.name, reused, len(got), want, got)
			}
		}
	}
}

// hold takes one of c's pool entries for the test, with a connection,
// as a call would; release gives it back.
func hold(t *testing.T, c *Client) *conn {
	t.Helper()
	c.mu.Lock()
	n := len(c.idle) - 1
	if n < 0 && c.free == 0 {
		c.mu.Unlock()
		t.Fatal("no pool entry to hold")
	}
	var cn *conn
	if n >= 0 {
		cn = c.idle[n]
		c.idle = c.idle[:n]
	} else {
		c.free--
	}
	c.mu.Unlock()
	if cn == nil {
		var err error
		if cn, err = dial(context.Background(), &c.opts); err != nil {
			t.Fatal(err)
		}
	}
	return cn
}

func release(c *Client, cn *conn) { put(c, cn) }

// warm fills c's pool with n open connections by holding n at once.
func warm(t *testing.T, c *Client, n int) {
	t.Helper()
	var held []*conn
	for i := 0; i < n; i++ {
		held = append(held, hold(t, c))
	}
	for _, cn := range held {
		release(c, cn)
	}
}

func TestPoolSize(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := newClient(t, Options{Addr: s.Addr, PoolSize: 4})
	const goroutines, calls = 64, 20
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		ids   = map[int64]bool{}
		fails int
	)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				v, err := c.Do(context.Background(), "CLIENT", "ID")
				mu.Lock()
				if id, ok := v.(int64); ok && err == nil {
					ids[id] = true
				} else {
					fails++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if fails != 0 {
		t.Errorf("%d failed calls", fails)
	}
	if len(ids) > 4 || len(ids) == 0 {
		t.Errorf("%d distinct connections served the calls, want 1 to 4", len(ids))
	}
}

func TestPoolWaitContext(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := newClient(t, Options{Addr: s.Addr, PoolSize: 1})
	held := hold(t, c)
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Do(cancelled, "PING"); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled while waiting: got %v, want context.Canceled", err)
	}
	expiring, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if _, err := c.Do(expiring, "PING"); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline while waiting: got %v, want context.DeadlineExceeded", err)
	}
	release(c, held)
	if v, err := c.Do(context.Background(), "PING"); err != nil || v != "PONG" {
		t.Errorf("PING once the slot is free: %#v, %v", v, err)
	}
}

func TestClose(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := newClient(t, Options{Addr: s.Addr, PoolSize: 3})
	warm(t, c, 3)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if _, err := c.Do(context.Background(), "PING"); err != ErrClosed {
			t.Fatalf("Do after Close: got %v, want ErrClosed", err)
		}
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// Only the test's probe connection remains on the server.
	probe := newClient(t, Options{Addr: s.Addr})
	v, err := probe.Do(context.Background(), "CLIENT", "LIST")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(v.(string), "\n"); n != 1 {
		t.Errorf("%d connections open after Close, want 1:\n%s", n, v)
	}
}

func BenchmarkEvalSha(b *testing.B) {
	s := redistest.Start(b, redistest.Options{})
	c, err := New(context.Background(), Options{Addr: s.Addr})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	// A script of the shape of a rate-limit decision: read, compute, write, reply.
	sha, err := c.ScriptLoad(context.Background(), `
local v = tonumber(redis.call('GET', KEYS[1]) or '0') + tonumber(ARGV[1])
redis.call('SET', KEYS[1], v, 'PX', ARGV[2])
return {1, v, 0}`)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		keys := []string{"bench:key"}
		args := []string{"1", strconv.Itoa(60000)}
		for pb.Next() {
			if _, err := c.EvalSha(ctx, sha, keys, args); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// Client implements model.Scripter (core/model/store.go); the interface is
// repeated here because resp does not import core.
var _ interface {
	EvalSha(ctx context.Context, sha string, keys []string, args []string) (interface{}, error)
	ScriptLoad(ctx context.Context, script string) (string, error)
} = (*Client)(nil)

// TestClientsConcurrent: clients used at once, each by its own goroutine,
// keep their own connections. (Under Yaegi v0.16.1, a pool of channels
// taken with select mixed them up: a goroutine gave one client's
// connection to another, whose pool then overflowed, and hung.)
func TestClientsConcurrent(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	var clients []*Client
	for i := 0; i < 8; i++ {
		clients = append(clients, newClient(t, Options{Addr: s.Addr, PoolSize: 2}))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(clients))
	end := time.Now().Add(300 * time.Millisecond)
	for _, c := range clients {
		wg.Add(1)
		go func(c *Client) {
			defer wg.Done()
			for time.Now().Before(end) {
				if _, err := c.Do(context.Background(), "PING"); err != nil {
					errs <- err
					return
				}
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, c := range clients {
		c.mu.Lock()
		if n := len(c.idle) + c.free; n != 2 || len(c.queue) != 0 {
			t.Errorf("client %d: %d idle or free entries and %d commands queued, want 2 and 0", i, n, len(c.queue))
		}
		c.mu.Unlock()
	}
}

// serveLoopback starts a server on loopback that runs serve, each in a
// goroutine of its own, for the connections it accepts until the test
// ends, and returns its address.
func serveLoopback(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(nc)
		}
	}()
	return ln.Addr().String()
}
