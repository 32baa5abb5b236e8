package resp

import (
	"context"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestLazyCloseDuringDial: a client closed while it dials keeps no pool
// open: the dial's connection is closed, not installed.
func TestLazyCloseDuringDial(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted, release, closedByClient := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		cn, err := ln.Accept()
		if err != nil {
			return
		}
		defer cn.Close()
		buf := make([]byte, 64)
		cn.Read(buf) // the PING
		close(accepted)
		<-release
		cn.Write([]byte("+PONG\r\n"))
		if _, err := cn.Read(buf); err != nil { // EOF: the client closed it
			close(closedByClient)
		}
	}()
	c := NewLazy(Target{Options: Options{Addr: ln.Addr().String(), DialTimeout: 5 * time.Second}}, nil, nil)
	done := make(chan error, 1)
	go func() {
		_, err := c.Connect(context.Background())
		done <- err
	}()
	<-accepted
	c.Close()
	close(release)
	if err := <-done; err != ErrClosed {
		t.Errorf("Connect across Close: %v, want ErrClosed", err)
	}
	c.mu.Lock()
	live := c.conn != nil
	c.mu.Unlock()
	if live {
		t.Error("a client dialed across Close was kept")
	}
	select {
	case <-closedByClient:
	case <-time.After(5 * time.Second):
		t.Error("the connection dialed across Close was left open")
	}
}

// TestLazyRedial: while the server is down, a client dials at most once
// per RedialEvery on its clock, and the calls in between fail at once
// with the last dial's error.
func TestLazyRedial(t *testing.T) {
	var dials int32
	addr := serveLoopback(t, func(cn net.Conn) {
		atomic.AddInt32(&dials, 1)
		cn.Close() // a server that is not Redis: the PING fails
	})
	var now int64
	c := NewLazy(Target{Options: Options{Addr: addr}, Name: "down"}, func() int64 { return now }, nil)
	ctx := context.Background()
	if _, err := c.EvalSha(ctx, "0", nil, nil); err == nil {
		t.Fatal("EvalSha on a server that is not Redis: no error")
	}
	if n := atomic.LoadInt32(&dials); n != 1 {
		t.Fatalf("%d dials after the first call, want 1", n)
	}
	now += int64(RedialEvery) - 1
	_, err := c.ScriptLoad(ctx, "return 1")
	if err == nil {
		t.Fatal("ScriptLoad within RedialEvery: no error")
	}
	if n := atomic.LoadInt32(&dials); n != 1 {
		t.Errorf("%d dials within RedialEvery of the failed one, want 1", n)
	}
	now++
	c.EvalSha(ctx, "0", nil, nil)
	if n := atomic.LoadInt32(&dials); n != 2 {
		t.Errorf("%d dials RedialEvery after the failed one, want 2", n)
	}
}

// TestLazyReconnect: a client connects on its first call, tells onClient
// of the standalone server's client, and after Close connects again on
// the next call.
func TestLazyReconnect(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	var mu sync.Mutex
	var told []*Client
	c := NewLazy(Target{Options: Options{Addr: s.Addr}}, nil, func(cl *Client) {
		mu.Lock()
		told = append(told, cl)
		mu.Unlock()
	})
	ctx := context.Background()
	sha, err := c.ScriptLoad(ctx, "return 7")
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 2; round++ {
		v, err := c.EvalSha(ctx, sha, nil, nil)
		c.Close()
		if err != nil || v != int64(7) {
			t.Fatalf("round %d: EvalSha = %v, %v; want 7", round, v, err)
		}
	}
	mu.Lock()
	got := told
	mu.Unlock()
	if len(got) != 4 || got[0] == nil || got[1] != nil || got[2] == nil || got[3] != nil || got[0] == got[2] {
		t.Errorf("onClient was told %v; want a client, nil, another client, nil", got)
	}
}

// TestLazyDownAtStart: a client whose server is down fails with the
// dial's error, not ErrNotConnected, and connects once the server is back.
func TestLazyDownAtStart(t *testing.T) {
	s := redistest.Start(t, redistest.Options{})
	s.Stop()
	var now int64
	c := NewLazy(Target{Options: Options{Addr: s.Addr}}, func() int64 { return now }, nil)
	defer c.Close()
	ctx := context.Background()
	if _, err := c.Connect(ctx); err == nil || errors.Is(err, ErrNotConnected) {
		t.Fatalf("Connect with the server down: %v, want the dial's error", err)
	}
	s.Restart(t)
	now += int64(RedialEvery)
	if _, err := c.Connect(ctx); err != nil {
		t.Fatalf("Connect once the server is back: %v", err)
	}
}
