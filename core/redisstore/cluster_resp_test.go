package redisstore

import (
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
)

// TestRedisStoreRespCluster runs a Cluster-mode Store over resp.Cluster:
// concurrent callers racing for the last tokens of keys spread over the
// masters get exactly the tokens there are.
func TestRedisStoreRespCluster(t *testing.T) {
	cc := resptest.Cluster(t, redistest.StartCluster(t, 3).Addrs, 8)
	s := newTestRedisStore(t, cc, true)
	raceLastToken(t, s, 50)
}
