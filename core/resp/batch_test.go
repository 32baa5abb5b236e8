package resp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/await"
	"github.com/sluicehq/sluice/internal/redistest"
)

// stat returns the integer field name of the server's INFO stats.
func stat(t *testing.T, c *Client, name string) int64 {
	t.Helper()
	v, err := c.Do(context.Background(), "INFO", "stats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(v.(string), "\r\n") {
		if strings.HasPrefix(line, name+":") {
			n, err := strconv.ParseInt(line[len(name)+1:], 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("INFO stats has no %s", name)
	return 0
}

// TestBatchReplies: many callers sharing two connections get each its own
// reply, through Do, EvalSha and Run alike, while the server reads their
// commands in batches (fewer reads than commands).
func TestBatchReplies(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := newClient(t, Options{Addr: s.Addr, PoolSize: 2})
	probe := newClient(t, Options{Addr: s.Addr, PoolSize: 1})
	ctx := context.Background()
	sha, err := c.ScriptLoad(ctx, "return KEYS[1] .. ARGV[1]")
	if err != nil {
		t.Fatal(err)
	}
	reads0, cmds0 := stat(t, probe, "total_reads_processed"), stat(t, probe, "total_commands_processed")
	// batched is the least commands per read: under Yaegi (-short) the
	// callers are slower than the server, so fewer of their commands wait
	// for a connection (16 callers on a busy machine: 1.8 per read).
	goroutines, calls, batched := 64, 60, int64(2)
	if testing.Short() {
		goroutines, calls, batched = 16, 12, 1
	}
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				want := fmt.Sprintf("%d-%d", g, i)
				var v interface{}
				var err error
				switch i % 3 {
				case 0:
					v, err = c.Do(ctx, "ECHO", want)
				case 1:
					v, err = c.EvalSha(ctx, sha, []string{want[:1]}, []string{want[1:]})
				default:
					v, err = run(c, ctx, time.Now(), time.Second, "ECHO", AppendCommand(nil, "ECHO", want))
				}
				if err != nil || v != want {
					errs <- fmt.Errorf("caller %d, call %d: %#v, %v; want %q", g, i, v, err, want)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	reads := stat(t, probe, "total_reads_processed") - reads0
	cmds := stat(t, probe, "total_commands_processed") - cmds0
	t.Logf("%d commands in %d reads", cmds, reads)
	if cmds < int64(goroutines*calls) || reads*batched > cmds || reads >= cmds {
		t.Errorf("%d commands in %d reads: want %d commands or more, batched (fewer reads, and at most 1/%d as many)", cmds, reads, goroutines*calls, batched)
	}
}

// scriptedServer is a server on loopback that records the commands it
// reads, in order, and answers the i-th command of a connection with its
// last argument as a simple string while answer(i) holds, hanging up
// otherwise (as a Redis that ran it and went down).
type scriptedServer struct {
	addr   string
	answer func(i int) bool
	mu     sync.Mutex
	cmds   []string
}

func startScriptedServer(t *testing.T, answer func(i int) bool) *scriptedServer {
	t.Helper()
	s := &scriptedServer{answer: answer}
	s.addr = serveLoopback(t, s.serve)
	return s
}

func (s *scriptedServer) serve(nc net.Conn) {
	defer nc.Close()
	br := bufio.NewReader(nc)
	for i := 0; ; i++ {
		v, err := readReplyAt(br, 0, nil, nil)
		if err != nil {
			return
		}
		args, _ := v.([]interface{})
		if len(args) == 1 && args[0] == "PING" {
			nc.Write([]byte("+PONG\r\n"))
			i--
			continue
		}
		s.mu.Lock()
		s.cmds = append(s.cmds, fmt.Sprint(args...))
		s.mu.Unlock()
		if !s.answer(i) {
			return
		}
		fmt.Fprintf(nc, "+%v\r\n", args[len(args)-1])
	}
}

func (s *scriptedServer) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.cmds...)
}

// queued is the outcome of the calls that queueBehind started.
type queued struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	got map[string]error
}

// wait waits for the calls and returns each key's outcome.
func (q *queued) wait() map[string]error {
	q.wg.Wait()
	return q.got
}

// queueBehind holds c's only pool entry and starts one Do per key, each
// "ECHO key", waiting until all are queued. It returns the keys in the
// order of the queue (that of the batch to come), the entry held, and the
// calls to wait for.
func queueBehind(t *testing.T, c *Client, keys ...string) ([]string, *conn, *queued) {
	t.Helper()
	held := hold(t, c)
	q := &queued{got: map[string]error{}}
	for _, k := range keys {
		q.wg.Add(1)
		go echo(c, q, k)
	}
	var order []string
	for deadline := time.Now().Add(5 * time.Second); order == nil; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		if len(c.queue) == len(keys) {
			for _, k := range c.queue {
				order = append(order, k.a[1])
			}
		}
		c.mu.Unlock()
		if order == nil && time.Now().After(deadline) {
			t.Fatal("the calls did not queue")
		}
	}
	return order, held, q
}

// echo sends ECHO k on c and records its outcome in q.
func echo(c *Client, q *queued, k string) {
	defer q.wg.Done()
	v, err := c.Do(context.Background(), "ECHO", k)
	if err == nil && v != k {
		err = fmt.Errorf("reply %#v", v)
	}
	q.mu.Lock()
	q.got[k] = err
	q.mu.Unlock()
}

// TestBatchConnectionLost: a connection that ends in the middle of a
// batch gives the replies read to their callers and fails the others,
// whose commands were written and may have run: none is sent again, and
// the client goes on with a new connection.
func TestBatchConnectionLost(t *testing.T) {
	s := startScriptedServer(t, func(i int) bool { return i == 0 })
	c := newClient(t, Options{Addr: s.addr, PoolSize: 1})
	order, held, q := queueBehind(t, c, "a", "b", "c")
	release(c, held) // New's connection: the batch is its first command
	got := q.wait()
	for i, k := range order {
		if err := got[k]; (err == nil) != (i == 0) {
			t.Errorf("%s, command %d of the batch: error %v; want only the first answered", k, i, err)
		}
	}
	if r := s.received(); len(r) > 3 {
		t.Errorf("the server read %q: a command was sent twice", r)
	}
	if v, err := c.Do(context.Background(), "ECHO", "next"); err != nil || v != "next" {
		t.Errorf("after the loss: %#v, %v", v, err)
	}
}

// shortWriter is a connection whose next Write sends only its first n
// bytes and fails.
type shortWriter struct {
	net.Conn
	n int
}

func (w *shortWriter) Write(b []byte) (int, error) {
	k, _ := w.Conn.Write(b[:w.n])
	return k, errors.New("short write")
}

// TestBatchWriteFails: when writing a batch to a reused connection fails
// (here just after its first command), the commands written whole fail
// (they may have run) and the others, which the server never ran, are sent
// once more on a new connection.
func TestBatchWriteFails(t *testing.T) {
	s := startScriptedServer(t, func(int) bool { return true })
	c := newClient(t, Options{Addr: s.addr, PoolSize: 1})
	order, held, q := queueBehind(t, c, "a", "b", "c")
	first := len(AppendCommand(nil, "ECHO", order[0]))
	held.nc = &shortWriter{Conn: held.nc, n: first}
	release(c, held)
	got := q.wait()
	for i, k := range order {
		if err := got[k]; (err == nil) != (i > 0) {
			t.Errorf("%s, command %d of the batch: error %v; want only the first to fail", k, i, err)
		}
	}
	want := []string{"ECHOa", "ECHOb", "ECHOc"}
	r := s.received()
	sort.Strings(r)
	if strings.Join(r, ",") != strings.Join(want, ",") {
		t.Errorf("the server read %q, want %q: each command once", r, want)
	}
}

// TestBatchDeadline: a command still queued when its deadline passes is
// failed without being sent.
func TestBatchDeadline(t *testing.T) {
	s := startScriptedServer(t, func(int) bool { return true })
	c := newClient(t, Options{Addr: s.addr, PoolSize: 1, ReadTimeout: 10 * time.Millisecond, WriteTimeout: 10 * time.Millisecond})
	_, held, q := queueBehind(t, c, "late")
	time.Sleep(30 * time.Millisecond) // past the queued call's deadline
	release(c, held)
	if err := q.wait()["late"]; !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued past its deadline: %v, want context.DeadlineExceeded", err)
	}
	if r := s.received(); len(r) != 0 {
		t.Errorf("the server read %q, want nothing", r)
	}
}

// TestBatchOwnDeadline: a command batched with others returns by its own
// deadline while the batch is still in flight, and the others, whose
// deadlines are later, get their replies: one command's deadline never
// fails another's.
func TestBatchOwnDeadline(t *testing.T) {
	early := make(chan struct{})
	// The server answers once the early call has returned.
	s := startScriptedServer(t, func(int) bool { return closedSoon(early) })
	c := newClient(t, Options{Addr: s.addr, PoolSize: 1, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	_, held, q := queueBehind(t, c, "a", "b")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	var early1 error
	go func() {
		_, early1 = c.Do(ctx, "ECHO", "early")
		close(early)
	}()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		n := len(c.queue)
		c.mu.Unlock()
		if n == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the early call did not queue")
		}
	}
	release(c, held)
	got := q.wait()
	<-early
	if !errors.Is(early1, context.DeadlineExceeded) {
		t.Errorf("the early call: %v, want context.DeadlineExceeded", early1)
	}
	if got["a"] != nil || got["b"] != nil {
		t.Errorf("the calls batched with it: %v, want their replies", got)
	}
	if r := s.received(); len(r) != 3 {
		t.Errorf("the server read %q, want the three commands", r)
	}
}

// closedSoon reports whether ch is closed within five seconds.
func closedSoon(ch <-chan struct{}) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return await.Closed(ctx, ch) == nil
}
