package redistest

import (
	"strconv"
	"testing"
)

// StartOneNodeCluster starts a Redis Cluster of one master holding all
// 16384 slots and returns once it reports cluster_state:ok. It needs no
// redis-cli. The node is stopped by t.Cleanup.
func StartOneNodeCluster(t testing.TB) *Cluster {
	t.Helper()
	s := start(t, Options{}, true)
	c := &Cluster{Addrs: []string{s.Addr}, Nodes: []*Server{s}}
	if r, err := command(s.Addr, "CLUSTER ADDSLOTSRANGE 0 16383"); err != nil || r != "OK" {
		t.Fatalf("redistest: CLUSTER ADDSLOTSRANGE on %s: %q, %v", s.Addr, r, err)
	}
	if err := c.waitOK(clusterTimeout); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	return c
}

// Announce makes the cluster node s give 127.0.0.1:port as its address
// (in CLUSTER SLOTS, MOVED and ASK) instead of its own, so that cluster
// clients reach it through a Proxy listening there. A restart forgets it.
func (s *Server) Announce(t testing.TB, port int) {
	t.Helper()
	for _, set := range []string{"CONFIG SET cluster-announce-ip 127.0.0.1", "CONFIG SET cluster-announce-port " + strconv.Itoa(port)} {
		if r, err := command(s.Addr, set); err != nil || r != "OK" {
			t.Fatalf("redistest: %s on %s: %q, %v", set, s.Addr, r, err)
		}
	}
}

// SetSlotMigrating marks slot, which Nodes[from] holds, as migrating to
// Nodes[to] (CLUSTER SETSLOT ... IMPORTING on to, MIGRATING on from), as
// a resharding does before it moves the slot's keys: from then answers
// ASK for the keys of slot it does not hold.
func (c *Cluster) SetSlotMigrating(t testing.TB, slot, from, to int) {
	t.Helper()
	s := strconv.Itoa(slot)
	c.setSlot(t, to, "CLUSTER SETSLOT "+s+" IMPORTING "+c.nodeID(t, from))
	c.setSlot(t, from, "CLUSTER SETSLOT "+s+" MIGRATING "+c.nodeID(t, to))
}

// SetSlotNode gives slot to Nodes[to] on every node (CLUSTER SETSLOT ...
// NODE, on to first), as a resharding does once it has moved the slot's
// keys: the other nodes then answer MOVED for it. The slot must hold no
// key, and should be migrating to Nodes[to] (SetSlotMigrating), so that
// to's claim wins.
func (c *Cluster) SetSlotNode(t testing.TB, slot, to int) {
	t.Helper()
	set := "CLUSTER SETSLOT " + strconv.Itoa(slot) + " NODE " + c.nodeID(t, to)
	c.setSlot(t, to, set)
	for i := range c.Nodes {
		if i != to {
			c.setSlot(t, i, set)
		}
	}
}

// nodeID returns the cluster node ID of Nodes[i].
func (c *Cluster) nodeID(t testing.TB, i int) string {
	t.Helper()
	id, err := command(c.Addrs[i], "CLUSTER MYID")
	if err != nil || id == "" || id[0] == '-' {
		t.Fatalf("redistest: CLUSTER MYID on %s: %q, %v", c.Addrs[i], id, err)
	}
	return id
}

// setSlot sends the CLUSTER SETSLOT command set to Nodes[i].
func (c *Cluster) setSlot(t testing.TB, i int, set string) {
	t.Helper()
	if r, err := command(c.Addrs[i], set); err != nil || r != "OK" {
		t.Fatalf("redistest: %s on %s: %q, %v", set, c.Addrs[i], r, err)
	}
}

// ScriptsRefused returns how many script calls (EVAL and EVALSHA) the
// server has refused without running them since it started, per INFO
// commandstats (rejected_calls): those a cluster node redirected by
// MOVED or ASK, among others.
func (s *Server) ScriptsRefused(t testing.TB) int {
	t.Helper()
	return s.scriptStat(t, "rejected_calls")
}
