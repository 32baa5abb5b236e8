// Package resptest gives tests core/resp clients of the Redis servers
// that internal/redistest starts: a pooled client of one server, a
// core/resp Cluster, and a minimal Redis Cluster Scripter that sends each
// script to the master owning its keys' slot. The tests of core and of
// core/inspect share it.
//
// It imports the standard library and core/resp only, so that core's
// tests, which import it, also run under Traefik's Yaegi interpreter;
// core/resp's own tests cannot import it.
package resptest

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/resp"
)

// Client connects to addr with a pool of poolSize connections, closed by
// t.Cleanup; it fails t when it cannot connect.
func Client(t testing.TB, addr string, poolSize int) *resp.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := resp.New(ctx, resp.Options{Addr: addr, PoolSize: poolSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Cluster connects a core/resp Cluster to the masters at addrs (a
// redistest.Cluster's Addrs), with pools of poolSize connections, closed
// by t.Cleanup; it fails t when it cannot connect.
func Cluster(t testing.TB, addrs []string, poolSize int) *resp.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := resp.NewCluster(ctx, addrs, resp.Options{PoolSize: poolSize})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// slots is the number of a Redis Cluster's hash slots.
const slots = 16384

// ClusterScripter is a minimal Redis Cluster Scripter (model.Scripter) for
// tests: it sends each script to the node that owns its keys' slot, per
// CLUSTER SLOTS when it was made, and loads scripts on every node. Unlike
// core/resp's Cluster it follows no redirection.
type ClusterScripter struct {
	// Nodes are clients of the masters, in the order of the addresses
	// given to NewClusterScripter.
	Nodes []*resp.Client
	owner [slots]int // index into Nodes, per slot
}

// NewClusterScripter connects to the masters at addrs (a
// redistest.Cluster's Addrs) with pools of 4 connections, closed by
// t.Cleanup, and reads which one owns each slot; it fails t unless the
// masters at addrs own every slot.
func NewClusterScripter(t testing.TB, addrs []string) *ClusterScripter {
	t.Helper()
	cs := &ClusterScripter{}
	index := map[string]int{}
	for i, addr := range addrs {
		cs.Nodes = append(cs.Nodes, Client(t, addr, 4))
		index[addr] = i
	}
	v, err := cs.Nodes[0].Do(context.Background(), "CLUSTER", "SLOTS")
	if err != nil {
		t.Fatal(err)
	}
	ranges, _ := v.([]interface{})
	covered := 0
	for _, r := range ranges {
		f, _ := r.([]interface{})
		if len(f) < 3 {
			t.Fatalf("CLUSTER SLOTS: unexpected entry %v", r)
		}
		master, _ := f[2].([]interface{})
		from, _ := f[0].(int64)
		to, _ := f[1].(int64)
		if len(master) < 2 {
			t.Fatalf("CLUSTER SLOTS: unexpected entry %v", r)
		}
		host, _ := master[0].(string)
		port, _ := master[1].(int64)
		node, ok := index[host+":"+strconv.FormatInt(port, 10)]
		if !ok {
			t.Fatalf("CLUSTER SLOTS: unknown node %v", master)
		}
		for slot := from; slot <= to; slot++ {
			cs.owner[slot] = node
			covered++
		}
	}
	if covered != slots {
		t.Fatalf("CLUSTER SLOTS covers %d slots", covered)
	}
	return cs
}

// EvalSha implements model.Scripter on the node of keys' slot. It fails
// without keys, and with keys of different slots as Redis Cluster does
// (CROSSSLOT).
func (c *ClusterScripter) EvalSha(ctx context.Context, sha string, keys, args []string) (interface{}, error) {
	if len(keys) == 0 {
		return nil, errors.New("resptest: ClusterScripter: no keys")
	}
	slot := resp.KeySlot(keys[0])
	for _, k := range keys[1:] {
		if resp.KeySlot(k) != slot {
			return nil, errors.New("CROSSSLOT Keys in request don't hash to the same slot")
		}
	}
	return c.Nodes[c.owner[slot]].EvalSha(ctx, sha, keys, args)
}

// ScriptLoad implements model.Scripter on every node; it returns the
// script's SHA-1.
func (c *ClusterScripter) ScriptLoad(ctx context.Context, script string) (string, error) {
	var sha string
	for _, n := range c.Nodes {
		s, err := n.ScriptLoad(ctx, script)
		if err != nil {
			return "", err
		}
		sha = s
	}
	return sha, nil
}
