package resp

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// setScript writes ARGV[1] at KEYS[1]; the test reads it on the master.
const setScript = "redis.call('SET', KEYS[1], ARGV[1]) return 'set'"

// TestSentinel: a Sentinel client finds the master the Sentinels name,
// runs scripts there, and after a failover runs them on the promoted
// replica within about a second (a recheck), although the former master
// still accepts writes then; a command refused with READONLY runs again
// on the new master.
func TestSentinel(t *testing.T) {
	rs := redistest.StartSentinel(t, "sluicetest")
	ctx := context.Background()
	if _, err := NewSentinel(ctx, SentinelOptions{MasterName: "nosuch", Addrs: rs.Addrs}, Options{}); err == nil || !strings.Contains(err.Error(), `"nosuch"`) {
		t.Fatalf("unknown master name: %v, want an error naming it", err)
	}
	if _, err := NewSentinel(ctx, SentinelOptions{Addrs: rs.Addrs}, Options{}); err == nil {
		t.Fatal("no master name: no error")
	}
	// A Sentinel that accepts connections but never answers, listed first,
	// takes only its share of the time: the others are asked.
	hung, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hung.Close()
	go func() {
		for {
			c, err := hung.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	sctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	s, err := NewSentinel(sctx, SentinelOptions{MasterName: rs.Name, Addrs: append([]string{hung.Addr().String(), "127.0.0.1:1"}, rs.Addrs...)}, Options{})
	cancel()
	if err != nil {
		t.Fatalf("with a hung Sentinel first: %v", err)
	}
	defer s.Close()
	sha, err := s.ScriptLoad(ctx, setScript)
	if err != nil {
		t.Fatal(err)
	}
	run := func(value string) (interface{}, error) {
		return s.EvalSha(ctx, sha, []string{"k"}, []string{value})
	}
	if v, err := run("before"); err != nil || v != "set" {
		t.Fatalf("before the failover: %v, %v", v, err)
	}
	do := func(addr string, args ...string) interface{} {
		t.Helper()
		c, err := New(ctx, Options{Addr: addr})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		v, _ := c.Do(ctx, args...)
		return v
	}

	// Pointed at the replica (as after a stale answer), a script is
	// refused with READONLY; the Sentinels are asked again, and it runs
	// on the master.
	replica, err := New(ctx, Options{Addr: rs.Replica.Addr})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := replica.ScriptLoad(ctx, setScript); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	cur := s.client
	s.client = replica
	s.asked = time.Now().Add(-2 * minSentinelAsk) // no recheck due, a refresh allowed
	s.mu.Unlock()
	cur.Close()
	if v, err := run("readonly"); err != nil || v != "set" {
		t.Fatalf("a script sent to the replica: %v, %v; want it run again on the master", v, err)
	}
	if got := do(rs.Master.Addr, "GET", "k"); got != "readonly" {
		t.Fatalf("after READONLY, the master holds %v", got)
	}

	rs.Failover(t)
	do(rs.Master.Addr, "SCRIPT", "LOAD", setScript)
	// Bounded: the recheck comes within a second of the last question,
	// although the former master still accepts writes.
	deadline := time.Now().Add(3 * time.Second)
	for {
		v, err := run("after")
		got := do(rs.Master.Addr, "GET", "k")
		if err == nil && v == "set" && got == "after" {
			break
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("3 s after the failover to %s: %v, %v; the new master holds %v", rs.Master.Addr, v, err, got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestSentinelClosed: a Sentinel closed while a command fails on it
// answers ErrClosed or the command's error, never a nil client.
func TestSentinelClosed(t *testing.T) {
	rs := redistest.StartSentinel(t, "sluiceclosed")
	ctx := context.Background()
	s, err := NewSentinel(ctx, SentinelOptions{MasterName: rs.Name, Addrs: rs.Addrs}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	cl := s.client
	s.asked = time.Now().Add(-2 * minSentinelAsk)
	s.mu.Unlock()
	s.Close()
	readonly := Error("READONLY You can't write against a read only replica.")
	if _, err := sentinelFailed(s, ctx, cl, readonly, func(c *Client) (interface{}, error) {
		return c.Do(ctx, "PING")
	}); err == nil {
		t.Fatal("a READONLY refusal on a closed Sentinel: no error")
	}
	if _, err := s.EvalSha(ctx, "0", nil, nil); err != ErrClosed {
		t.Fatalf("EvalSha after Close: %v, want ErrClosed", err)
	}
}
