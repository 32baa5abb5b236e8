package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/resp"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestRedisStoreRespCluster runs a Cluster-mode Store over resp.Cluster:
// concurrent callers racing for the last tokens of keys spread over the
// masters get exactly the tokens there are.
func TestRedisStoreRespCluster(t *testing.T) {
	cluster := redistest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cc, err := resp.NewCluster(ctx, cluster.Addrs, resp.Options{PoolSize: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	s := newTestRedisStore(t, cc, true)
	raceLastToken(t, s, 50)
}
