package resptest

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestClusterScripter loads a script on every master, runs it on the
// master of its key's slot for keys of each, and refuses keys of two
// slots or none.
func TestClusterScripter(t *testing.T) {
	ctx := context.Background()
	cs := NewClusterScripter(t, redistest.StartCluster(t, 3).Addrs)
	sha, err := cs.ScriptLoad(ctx, "return redis.call('CLUSTER', 'KEYSLOT', KEYS[1])")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range cs.Nodes {
		if v, err := n.Do(ctx, "SCRIPT", "EXISTS", sha); err != nil || len(v.([]interface{})) != 1 || v.([]interface{})[0] != int64(1) {
			t.Fatalf("SCRIPT EXISTS on a master: %v, %v; want the script loaded on every master", v, err)
		}
	}
	// a, b and c hash to slots 15495, 3300 and 7365, of three masters: a
	// script sent to another master would fail with MOVED.
	for _, key := range []string{"a", "b", "c", "{user1000}.following", "x{a}y"} {
		want, err := cs.Nodes[0].Do(ctx, "CLUSTER", "KEYSLOT", key)
		if err != nil {
			t.Fatal(err)
		}
		if v, err := cs.EvalSha(ctx, sha, []string{key}, nil); err != nil || v != want {
			t.Errorf("EvalSha(%q) = %v, %v; want slot %v", key, v, err, want)
		}
	}
	if _, err := cs.EvalSha(ctx, sha, []string{"a", "b"}, nil); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
		t.Errorf("keys of two slots: error %v, want CROSSSLOT", err)
	}
	if _, err := cs.EvalSha(ctx, sha, nil, nil); err == nil {
		t.Error("no keys: no error")
	}
}
