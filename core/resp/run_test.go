package resp

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// FuzzReadText: readText reads what readReplyAt reads, to the same values,
// errors and position in the stream.
func FuzzReadText(f *testing.F) {
	for _, s := range []string{
		"$3\r\nabc\r\n$0\r\n\r\n",
		"$20\r\n0123456789abcdefghij\r\n+OK\r\n",
		"$5\r\nab\ncd\r\n:1\r\n",
		"$5\r\nab\r\n\r\n",
		"$3\r\nabcd\r\n",
		"$5\r\nabc",
		"$5\r\n",
		"$-1\r\n",
		"$ 3\r\nabc\r\n",
		"$+3\r\nabc\r\n",
		"$0003\r\nabc\r\n",
		"$12345\r\nabc\r\n",
		"$3\nabc\r\n",
		"$\r\n",
		"-NOSCRIPT No matching script\r\n$1\r\nx\r\n",
		"*2\r\n$1\r\na\r\n:2\r\n",
		":12\r\n",
		"+PONG\r\n",
		"",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r1 := bufio.NewReaderSize(bytes.NewReader(data), 16)
		r2 := bufio.NewReaderSize(bytes.NewReader(data), 16)
		for i := 0; i <= len(data); i++ {
			v1, err1 := readText(r1)
			v2, err2 := readReplyAt(r2, 0, nil, nil)
			if fmt.Sprint(err1) != fmt.Sprint(err2) || !reflect.DeepEqual(v1, v2) {
				t.Fatalf("reply %d: readText %#v, %v; readReplyAt %#v, %v", i, v1, err1, v2, err2)
			}
			if err1 != nil {
				if _, ok := err1.(Error); !ok {
					return
				}
			}
		}
	})
}

// run is Run without its variables.
func run(c *Client, ctx context.Context, start time.Time, timeout time.Duration, name string, cmd []byte) (interface{}, error) {
	return Run(c, ctx, start, timeout, name, cmd)
}

// TestRun: Run sends encoded commands and decodes every kind of reply.
func TestRun(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := newClient(t, Options{Addr: s.Addr, PoolSize: 2})
	ctx := context.Background()
	long := strings.Repeat("x", 5000) + "\n" + strings.Repeat("y", 20000)
	steps := []struct {
		args []string
		want interface{}
		err  string
	}{
		{[]string{"PING"}, "PONG", ""},
		{[]string{"SET", "k", "a\r\nb\nc"}, "OK", ""},
		{[]string{"GET", "k"}, "a\r\nb\nc", ""},
		{[]string{"SET", "long", long}, "OK", ""},
		{[]string{"GET", "long"}, long, ""},
		{[]string{"SET", "mid", long[:4000]}, "OK", ""},
		{[]string{"GET", "mid"}, long[:4000], ""},
		{[]string{"GET", "missing"}, nil, ""},
		{[]string{"INCR", "n"}, int64(1), ""},
		{[]string{"EVAL", "return '1 2 3 4 5 6'", "0"}, "1 2 3 4 5 6", ""},
		{[]string{"EVAL", "return ''", "0"}, "", ""},
		{[]string{"EVAL", "return {1, 'x'}", "0"}, []interface{}{int64(1), "x"}, ""},
		{[]string{"EVALSHA", strings.Repeat("0", 40), "0"}, nil, "NOSCRIPT"},
		{[]string{"GET", "k"}, "a\r\nb\nc", ""},
	}
	for _, st := range steps {
		v, err := run(c, ctx, time.Now(), time.Second, st.args[0], AppendCommand(nil, st.args...))
		if st.err != "" {
			if _, ok := err.(Error); !ok || !strings.HasPrefix(err.Error(), st.err) {
				t.Errorf("%q: got %#v, %v; want an error reply %s", st.args, v, err, st.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(v, st.want) {
			t.Errorf("%q: got %#v, %v; want %#v", st.args[:2], v, err, st.want)
		}
	}
}

// TestRunTimeouts: Run ends at its timeout from start, at ctx's deadline,
// and at the client's timeouts, whichever comes first, with the errors of
// Do; a call that fails so leaves the client usable.
func TestRunTimeouts(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := newClient(t, Options{Addr: s.Addr, ReadTimeout: 10 * time.Second})
	blpop := AppendCommand(nil, "BLPOP", "empty", "5")
	ctx := context.Background()
	began := time.Now()
	_, err := run(c, ctx, began, 30*time.Millisecond, "BLPOP", blpop)
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(began) > 2*time.Second {
		t.Errorf("past the timeout: %v after %v, want context.DeadlineExceeded", err, time.Since(began))
	}
	// start counts: a timeout already past fails at once.
	_, err = run(c, ctx, time.Now().Add(-time.Minute), time.Second, "BLPOP", blpop)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("timeout past at start: %v, want context.DeadlineExceeded", err)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	_, err = run(c, dctx, time.Now(), 0, "BLPOP", blpop)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("past ctx's deadline: %v, want context.DeadlineExceeded", err)
	}
	c2 := newClient(t, Options{Addr: s.Addr, ReadTimeout: 30 * time.Millisecond, WriteTimeout: 30 * time.Millisecond})
	_, err = run(c2, ctx, time.Now(), time.Minute, "BLPOP", blpop)
	if !errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("past the client's timeouts: %v, want only a deadline error", err)
	}
	for _, cl := range []*Client{c, c2} {
		if v, err := run(cl, ctx, time.Now(), time.Second, "PING", AppendCommand(nil, "PING")); err != nil || v != "PONG" {
			t.Errorf("PING after a timeout: %#v, %v", v, err)
		}
	}
}

// TestRunPool: Run waits for a connection within its timeout, dials new
// ones, fails once on connections the server closed (the command written
// may have run, so it is not resent) and replaces them all, and fails with
// ErrClosed once the client is closed.
func TestRunPool(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	c := newClient(t, Options{Addr: s.Addr, PoolSize: 4})
	ctx := context.Background()
	incr := AppendCommand(nil, "INCR", "n")
	warm(t, c, 4)
	s.Restart(t)
	if v, err := run(c, ctx, time.Now(), time.Second, "INCR", incr); err == nil {
		t.Fatalf("INCR on a connection the server closed: %#v, no error", v)
	}
	for i := 0; i < 8; i++ {
		if v, err := run(c, ctx, time.Now(), time.Second, "INCR", incr); err != nil || v != int64(i+1) {
			t.Fatalf("INCR %d after restart: %#v, %v", i, v, err)
		}
	}
	var held []*conn
	for i := 0; i < 4; i++ {
		held = append(held, hold(t, c))
	}
	_, err := run(c, ctx, time.Now(), 30*time.Millisecond, "INCR", incr)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "waiting for a connection") {
		t.Errorf("pool exhausted: %v, want a deadline error while waiting", err)
	}
	for _, cn := range held {
		release(c, cn)
	}
	c.Close()
	if _, err := run(c, ctx, time.Now(), time.Second, "INCR", incr); err != ErrClosed {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
}
