package redistest

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Cluster is a Redis Cluster of masters without replicas, each a [Server]
// on 127.0.0.1, with all 16384 slots assigned.
type Cluster struct {
	// Addrs are the masters' addresses, in the order of Nodes.
	Addrs []string
	// Nodes are the masters; stop or restart one to test failures.
	Nodes []*Server
}

// clusterTimeout bounds redis-cli's cluster creation and the wait for
// every node to report cluster_state:ok.
const clusterTimeout = 30 * time.Second

// StartCluster starts masters (at least 3, as redis-cli requires)
// cluster-enabled servers, joins them with
// `redis-cli --cluster create ... --cluster-yes`, and returns once every
// node reports cluster_state:ok, knows every other node and sees all slots
// assigned. The nodes are stopped by t.Cleanup.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("redistest: a Redis Cluster needs at least 3 masters, got %d", masters)
	}
	cli := requireBinary(t, "redis-cli")
	c := &Cluster{}
	for i := 0; i < masters; i++ {
		s := start(t, Options{}, true)
		c.Nodes = append(c.Nodes, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	argv := append([]string{"redis-cli", "--cluster", "create"}, c.Addrs...)
	argv = append(argv, "--cluster-yes")
	dir := c.Nodes[0].dir
	log := filepath.Join(dir, "cluster-create.log")
	p, err := startProcess(cli, argv, dir, log)
	if err != nil {
		t.Fatalf("redistest: running redis-cli --cluster create: %v", err)
	}
	if !p.wait(clusterTimeout) {
		p.stop()
		t.Fatalf("redistest: redis-cli --cluster create did not finish within %v; output: %s", clusterTimeout, p.logTail())
	}
	if err := c.waitOK(clusterTimeout); err != nil {
		t.Fatalf("redistest: %v; redis-cli output: %s", err, p.logTail())
	}
	return c
}

// waitOK polls CLUSTER INFO on every node until each reports a healthy
// cluster of len(c.Nodes) nodes, or timeout elapses.
func (c *Cluster) waitOK(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	want := []string{
		"cluster_state:ok",
		"cluster_slots_ok:16384",
		"cluster_known_nodes:" + strconv.Itoa(len(c.Nodes)),
	}
	for {
		bad := ""
		for _, addr := range c.Addrs {
			info, err := command(addr, "CLUSTER INFO")
			if err != nil {
				bad = fmt.Sprintf("%s: %v", addr, err)
				break
			}
			if missing := missingLine(info, want); missing != "" {
				bad = fmt.Sprintf("%s: CLUSTER INFO lacks %s", addr, missing)
				break
			}
		}
		if bad == "" {
			return nil
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("cluster not ready within %v: %s", timeout, bad)
		}
		time.Sleep(pollInterval)
	}
}

// missingLine returns the first of want that is not a line of info, or "".
func missingLine(info string, want []string) string {
	lines := strings.Split(strings.ReplaceAll(info, "\r", ""), "\n")
	for _, w := range want {
		found := false
		for _, l := range lines {
			if l == w {
				found = true
				break
			}
		}
		if !found {
			return w
		}
	}
	return ""
}
