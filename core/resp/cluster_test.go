package resp

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// incrScript increments its key and returns the new value.
const incrScript = "return redis.call('INCR', KEYS[1])"

// newTestCluster returns a Cluster client of c seeded with seeds, closed by
// t.Cleanup.
func newTestCluster(t *testing.T, seeds []string) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cc, err := NewCluster(ctx, seeds, Options{PoolSize: 4})
	if err != nil {
		t.Fatalf("NewCluster(%v): %v", seeds, err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// owner returns the index of the node of c holding key, found by asking
// each node: the others reply MOVED.
func owner(t *testing.T, nodes []*Client, key string) (int, interface{}) {
	t.Helper()
	found, value := -1, interface{}(nil)
	for i, n := range nodes {
		v, err := n.Do(context.Background(), "GET", key)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "MOVED ") {
				t.Fatalf("GET %s on node %d: %v", key, i, err)
			}
			continue
		}
		if found >= 0 {
			t.Fatalf("GET %s answered by nodes %d and %d", key, found, i)
		}
		found = i
		value = v
	}
	return found, value
}

func TestClusterRouting(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	ctx := context.Background()
	var nodes []*Client
	for _, a := range cluster.Addrs {
		nodes = append(nodes, newClient(t, Options{Addr: a, PoolSize: 2}))
	}
	// One seed suffices; a dead one first is skipped.
	cc := newTestCluster(t, []string{"127.0.0.1:1", cluster.Addrs[1]})

	sha, err := cc.ScriptLoad(ctx, incrScript)
	if err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		v, err := n.Do(ctx, "SCRIPT", "EXISTS", sha)
		a, _ := v.([]interface{})
		if err != nil || len(a) != 1 || a[0] != int64(1) {
			t.Errorf("node %d: SCRIPT EXISTS = %v, %v; want [1]", i, v, err)
		}
	}

	hit := map[int]bool{}
	for k := 0; k < 30 && len(hit) < 3; k++ {
		key := "route{" + strconv.Itoa(k) + "}"
		v, err := nodes[0].Do(ctx, "CLUSTER", "KEYSLOT", key)
		if err != nil || v != int64(KeySlot(key)) {
			t.Fatalf("CLUSTER KEYSLOT %s = %v, %v; KeySlot says %d", key, v, err, KeySlot(key))
		}
		for want := int64(1); want <= 2; want++ {
			got, err := cc.EvalSha(ctx, sha, []string{key, key + ":other"}, nil)
			if err != nil || got != want {
				t.Fatalf("EvalSha on %s = %v, %v; want %d", key, got, err, want)
			}
		}
		i, v := owner(t, nodes, key)
		if i < 0 || v != "2" {
			t.Fatalf("%s: held by node %d as %v; want one node holding 2", key, i, v)
		}
		hit[i] = true
	}
	if len(hit) != 3 {
		t.Fatalf("keys reached %d of 3 masters", len(hit))
	}
	if _, err := cc.EvalSha(ctx, sha, []string{"a", "b"}, nil); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
		t.Errorf("EvalSha across slots: %v; want CROSSSLOT", err)
	}
}

func TestClusterRedirections(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	ctx := context.Background()
	var nodes []*Client
	var ids []string
	for _, a := range cluster.Addrs {
		n := newClient(t, Options{Addr: a, PoolSize: 2})
		v, err := n.Do(ctx, "CLUSTER", "MYID")
		if err != nil {
			t.Fatal(err)
		}
		id, _ := v.(string)
		nodes = append(nodes, n)
		ids = append(ids, id)
	}
	cc := newTestCluster(t, cluster.Addrs)
	sha, err := cc.ScriptLoad(ctx, incrScript)
	if err != nil {
		t.Fatal(err)
	}
	key := "moving"
	slot := strconv.Itoa(KeySlot(key))
	if _, err := cc.EvalSha(ctx, sha, []string{key}, nil); err != nil {
		t.Fatal(err)
	}
	from, _ := owner(t, nodes, key)
	to := (from + 1) % 3
	do := func(node int, args ...string) {
		t.Helper()
		if _, err := nodes[node].Do(ctx, args...); err != nil {
			t.Fatalf("node %d: %v: %v", node, args, err)
		}
	}
	do(from, "DEL", key)

	// Migration under way, key absent on the source: it replies ASK.
	do(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[from])
	do(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[to])
	if v, err := cc.EvalSha(ctx, sha, []string{key}, nil); err != nil || v != int64(1) {
		t.Fatalf("EvalSha during migration = %v, %v; want 1 via ASK", v, err)
	}
	// Migration done: the source replies MOVED.
	for i := range nodes {
		do(i, "CLUSTER", "SETSLOT", slot, "NODE", ids[to])
	}
	if v, err := cc.EvalSha(ctx, sha, []string{key}, nil); err != nil || v != int64(2) {
		t.Fatalf("EvalSha after migration = %v, %v; want 2 via MOVED", v, err)
	}
	if i, v := owner(t, nodes, key); i != to || v != "2" {
		t.Fatalf("%s held by node %d as %v; want node %d holding 2", key, i, v, to)
	}
	// The map was refreshed: no redirection now.
	cc.mu.Lock()
	routed := cc.owner[KeySlot(key)].opts.Addr
	cc.mu.Unlock()
	if routed != cluster.Addrs[to] {
		t.Errorf("slot %s routed to %s; want %s", slot, routed, cluster.Addrs[to])
	}
}

func TestNewClusterErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tests := []struct {
		name  string
		seeds []string
		opts  Options
		err   string
	}{
		{"no_seed", nil, Options{}, "no seed"},
		{"db", []string{"127.0.0.1:1"}, Options{DB: 1}, "only DB 0"},
		{"bad_addr", []string{"nope"}, Options{}, "Addr"},
		{"unreachable", []string{"127.0.0.1:1"}, Options{DialTimeout: 200 * time.Millisecond}, "no node answered"},
	}
	for _, tt := range tests {
		cc, err := NewCluster(ctx, tt.seeds, tt.opts)
		if err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("%s: NewCluster = %v, %v; want an error containing %q", tt.name, cc, err, tt.err)
		}
	}
}

func TestKeySlot(t *testing.T) {
	tests := []struct {
		key  string
		slot int
	}{
		{"123456789", 0x31c3 & 16383}, // the CRC16/XMODEM check value
		{"", 0},
		{"{user1000}.following", KeySlot("user1000")},
		{"foo{}{bar}", KeySlot("foo{}{bar}")},
		{"foo{{bar}}zap", KeySlot("{bar")},
		{"foo{bar}{zap}", KeySlot("bar")},
	}
	for _, tt := range tests {
		if got := KeySlot(tt.key); got != tt.slot {
			t.Errorf("KeySlot(%q) = %d, want %d", tt.key, got, tt.slot)
		}
	}
}

// silentNode accepts connections, answers the PING of a new connection and
// then nothing, as a master that hangs during a failover.
func silentNode(t *testing.T) string {
	t.Helper()
	return serveLoopback(t, func(cn net.Conn) {
		defer cn.Close()
		buf := make([]byte, 256)
		if _, err := cn.Read(buf); err != nil {
			return
		}
		cn.Write([]byte("+PONG\r\n"))
		for {
			if _, err := cn.Read(buf); err != nil {
				return
			}
		}
	})
}

// TestClusterRefreshDoesNotBlock: while a refresh waits for a master that
// does not answer, commands for the other masters go on with the current
// map instead of queueing behind it.
func TestClusterRefreshDoesNotBlock(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	ctx := context.Background()
	cc := newTestCluster(t, cluster.Addrs)
	sha, err := cc.ScriptLoad(ctx, incrScript)
	if err != nil {
		t.Fatal(err)
	}
	silent, err := New(ctx, Options{Addr: silentNode(t), ReadTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	// The next refresh asks the silent node first, and waits.
	cc.mu.Lock()
	cc.masters = append([]*Client{silent}, cc.masters...)
	cc.mu.Unlock()
	refreshed := make(chan error, 1)
	go func() { refreshed <- cc.refresh(ctx) }()
	for {
		cc.mu.Lock()
		busy := cc.refreshing != nil
		cc.mu.Unlock()
		if busy {
			break
		}
		time.Sleep(time.Millisecond) // until the refresh has started
	}
	for i := 0; i < 20; i++ {
		if _, err := cc.EvalSha(ctx, sha, []string{"k" + strconv.Itoa(i)}, nil); err != nil {
			t.Fatalf("command %d during the refresh: %v", i, err)
		}
	}
	cc.mu.Lock()
	stillBusy := cc.refreshing != nil
	cc.mu.Unlock()
	if !stillBusy {
		t.Fatal("the refresh ended before the commands: the test proves nothing")
	}
	if err := <-refreshed; err != nil {
		t.Errorf("refresh after the silent node: %v", err)
	}
}
