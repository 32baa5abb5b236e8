package traefikplugin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/resp"
)

// defaultRedisEndpoint is Traefik's default rateLimit.redis.endpoints.
const defaultRedisEndpoint = "localhost:6379"

// envPrefix marks a password read from the environment: "env:NAME".
const envPrefix = "env:"

// redisOptions are the parsed rateLimit.redis options.
type redisOptions struct {
	resp resp.Options
	// seeds, when redis.endpoints lists several servers, are the Redis
	// Cluster seed addresses; resp.Addr is then the first.
	seeds []string
	// sentinel, when set, finds the master through Redis Sentinels.
	sentinel *resp.SentinelOptions
	// readable puts the clients' keys in Redis key names.
	readable bool
	// name designates the server or cluster in logs and errors.
	name string
	// id identifies the connection settings, secrets included; middlewares
	// with the same id share one client.
	id string
	// timeout bounds one decision: a dial and a command's round trip.
	timeout time.Duration
}

// parseRedis reads the redis block.
func parseRedis(r *Redis, s *settings) (*redisOptions, error) {
	if err := refuseUnsupported(r); err != nil {
		return nil, err
	}
	o := &redisOptions{}
	endpoints := parseList(r.Endpoints)
	var sentinelID string
	if r.Sentinel != nil {
		if len(endpoints) > 0 {
			return nil, errors.New("redis.sentinel: set either redis.endpoints or redis.sentinel, not both")
		}
		so, err := parseSentinel(r.Sentinel)
		if err != nil {
			return nil, err
		}
		o.sentinel = so
		// Addr stands for the master in names; the Sentinels say which
		// server it is.
		endpoints = []string{so.Addrs[0]}
		sentinelID = strings.Join([]string{so.MasterName, strings.Join(so.Addrs, ","), so.Username, so.Password}, "\x00")
	}
	if len(endpoints) == 0 {
		endpoints = []string{defaultRedisEndpoint}
	}
	for _, e := range endpoints {
		if err := redisstore.CheckAddress(e); err != nil {
			return nil, errors.New(model.FieldOf(err).Format("redis.endpoints", ""))
		}
	}
	o.resp.Addr = endpoints[0]
	o.name = endpoints[0]
	if o.sentinel != nil {
		o.name = "master " + o.sentinel.MasterName + " of sentinels " + strings.Join(o.sentinel.Addrs, ",")
	}
	if len(endpoints) > 1 {
		o.seeds = endpoints
		o.name = "cluster " + strings.Join(endpoints, ",")
		s.notes = append(s.notes, fmt.Sprintf("redis.endpoints lists %d servers: a Redis Cluster seed list, as for the built-in", len(endpoints)))
	}
	o.resp.Username = strings.TrimSpace(r.Username)
	pw, err := secret("redis.password", r.Password)
	if err != nil {
		return nil, err
	}
	o.resp.Password = pw
	if err := redisstore.CheckUser(o.resp.Username, pw); err != nil {
		return nil, fieldError("redis.", err)
	}
	if o.resp.DB, err = parseInt("redis.db", r.DB, 0, 0, 1<<20); err != nil {
		return nil, err
	}
	if err := redisstore.CheckDB(o.resp.DB, o.seeds != nil); err != nil {
		return nil, fieldError("redis.", err)
	}
	if o.resp.PoolSize, err = parseInt("redis.poolSize", r.PoolSize, 0, 0, 1<<16); err != nil {
		return nil, err
	}
	maxActive, err := parseInt("redis.maxActiveConns", r.MaxActiveConns, 0, 0, 1<<16)
	if err != nil {
		return nil, err
	}
	if maxActive > 0 && (o.resp.PoolSize == 0 || maxActive < o.resp.PoolSize) {
		o.resp.PoolSize = maxActive
	}
	if o.resp.DialTimeout, err = parseDuration("redis.dialTimeout", r.DialTimeout); err != nil {
		return nil, err
	}
	if o.resp.ReadTimeout, err = parseDuration("redis.readTimeout", r.ReadTimeout); err != nil {
		return nil, err
	}
	if o.resp.WriteTimeout, err = parseDuration("redis.writeTimeout", r.WriteTimeout); err != nil {
		return nil, err
	}
	if o.readable, err = parseBool("redis.readableKeys", r.ReadableKeys); err != nil {
		return nil, err
	}
	if o.timeout, err = parseDuration("redis.timeout", r.Timeout); err != nil {
		return nil, err
	}
	if o.timeout == 0 {
		o.timeout = redisstore.DefaultTimeout
	}
	if s.leaseTTL, err = parseDuration("redis.leaseTTL", r.LeaseTTL); err != nil {
		return nil, err
	}
	if strings.TrimSpace(r.LeaseTTL) != "" && s.leaseTTL == 0 {
		return nil, fmt.Errorf("redis.leaseTTL %q: must be positive", r.LeaseTTL)
	}
	var tlsID string
	if r.TLS != nil {
		if o.resp.TLS, err = parseTLS(r.TLS); err != nil {
			return nil, err
		}
		tlsID = strings.Join([]string{r.TLS.CA, r.TLS.Cert, r.TLS.Key, strconv.FormatBool(o.resp.TLS.InsecureSkipVerify)}, "\x00")
	}
	o.id = strings.Join([]string{strings.Join(endpoints, ","), o.resp.Username, o.resp.Password, strconv.Itoa(o.resp.DB),
		strconv.Itoa(o.resp.PoolSize), o.resp.DialTimeout.String(), o.resp.ReadTimeout.String(),
		o.resp.WriteTimeout.String(), o.timeout.String(), tlsID, sentinelID, strconv.FormatBool(o.readable)}, "\x00")
	return o, nil
}

// parseSentinel reads redis.sentinel.
func parseSentinel(r *RedisSentinel) (*resp.SentinelOptions, error) {
	so := &resp.SentinelOptions{MasterName: strings.TrimSpace(r.MasterName), Addrs: parseList(r.Endpoints), Username: strings.TrimSpace(r.Username)}
	if err := redisstore.CheckSentinel(so.MasterName, so.Addrs); err != nil {
		return nil, fieldError("", err)
	}
	pw, err := secret("redis.sentinel.password", r.Password)
	if err != nil {
		return nil, err
	}
	so.Password = pw
	if err := redisstore.CheckUser(so.Username, pw); err != nil {
		return nil, fieldError("redis.sentinel.", err)
	}
	return so, nil
}

// secret reads a password option: the text itself, or with "env:NAME" the
// environment variable NAME, which must be set.
func secret(option, v string) (string, error) {
	if !strings.HasPrefix(v, envPrefix) {
		return v, nil
	}
	name := strings.TrimPrefix(v, envPrefix)
	pw := os.Getenv(name)
	if name == "" || pw == "" {
		return "", fmt.Errorf("%s: the environment variable %q is not set or empty", option, name)
	}
	return pw, nil
}

// refuseUnsupported names the first option of the built-in's redis block
// that the plugin cannot honour, and what to use instead.
func refuseUnsupported(r *Redis) error {
	const k8s = "the plugin cannot read Kubernetes secrets"
	switch {
	case strings.TrimSpace(r.Secret) != "":
		return fmt.Errorf("redis.secret: %s; set redis.password to env:NAME and give Traefik that environment variable", k8s)
	case r.TLS != nil && strings.TrimSpace(r.TLS.CASecret) != "":
		return fmt.Errorf("redis.tls.caSecret: %s; set redis.tls.ca to a file path or the PEM text", k8s)
	case r.TLS != nil && strings.TrimSpace(r.TLS.CertSecret) != "":
		return fmt.Errorf("redis.tls.certSecret: %s; set redis.tls.cert and redis.tls.key to file paths or PEM texts", k8s)
	case strings.TrimSpace(r.MinIdleConns) != "" && strings.TrimSpace(r.MinIdleConns) != "0":
		return errors.New("redis.minIdleConns: not supported; the plugin opens connections as requests need them and keeps them open, up to redis.poolSize: remove it")
	}
	return nil
}

// parseTLS builds the client TLS configuration as Traefik's ClientTLS does:
// CA, Cert and Key are file paths, or else the PEM text itself.
func parseTLS(t *RedisTLS) (*tls.Config, error) {
	insecure, err := parseBool("redis.tls.insecureSkipVerify", t.InsecureSkipVerify)
	if err != nil {
		return nil, err
	}
	c, err := redisstore.TLSConfig(t.CA, t.Cert, t.Key, insecure, "")
	if err != nil {
		return nil, fieldError("", err)
	}
	return c, nil
}

// redisClient is a Redis client (a connection pool per master) shared by
// every middleware with the same connection settings, with the store, the
// circuit breaker and the outage report that go with it. Its resp.Lazy
// connects on demand: a client whose server was down when the middleware
// was created keeps trying, at most once per resp.RedialEvery, from the
// request path; and a client whose connections the registry closed (it
// dropped the client's last entry, which Traefik may still route to)
// connects again when used.
type redisClient struct {
	opts redisOptions
	log  io.Writer // stderr: outages and recoveries

	// lazy is the *resp.Lazy the store calls, held as an io.Closer, and
	// store the *redisstore.Store, held as a model.Store: under Yaegi the
	// text of a type spells out every type its fields point to, and a
	// pointer would put a Lazy's or a Store's in the text of every type
	// holding a client (an entry's, a zone's, the registry's).
	lazy    io.Closer
	store   model.Store
	breaker core.Breaker
	// direct holds the standalone server's *resp.Client while connected,
	// for the store to send its common decisions to without EvalSha.
	direct redisstore.Direct

	refs int   // registry entries using it; under the registry's lock
	down int32 // atomic; 1 while an outage has been reported
}

// newRedisClient returns a client for o, trying to connect once within o's
// dial timeout. A failure is reported on log and is not an error: requests
// are then decided by the middleware's failure policy until the server
// answers.
func newRedisClient(ctx context.Context, o *redisOptions, clock model.Clock, log io.Writer) (*redisClient, error) {
	c := &redisClient{opts: *o, log: log}
	lazy := resp.NewLazy(resp.Target{Options: o.resp, Seeds: o.seeds, Sentinel: o.sentinel, ClusterTimeout: o.timeout, Name: o.name},
		clock, c.direct.Set)
	c.lazy = lazy
	st, err := redisstore.New(redisstore.Config{Client: lazy, Cluster: o.seeds != nil, ReadableKeys: o.readable, Direct: &c.direct})
	if err != nil {
		return nil, err
	}
	c.store = st
	if _, err := lazy.Connect(ctx); err != nil {
		atomic.StoreInt32(&c.down, 1)
		fmt.Fprintf(log, "sluice: redis %s unavailable: %v; requests are decided by onStoreError or the fallback until it answers\n", o.name, err)
	}
	return c, nil
}

// observe reports, one line each, the start of an outage (the circuit
// breaker opened) and its end (a decision succeeded again).
func (c *redisClient) observe(err error) {
	down := atomic.LoadInt32(&c.down) == 1
	if err == nil {
		if down && atomic.CompareAndSwapInt32(&c.down, 1, 0) {
			fmt.Fprintf(c.log, "sluice: redis %s available again\n", c.opts.name)
		}
		return
	}
	if !down && c.breaker.State() != core.BreakerClosed && atomic.CompareAndSwapInt32(&c.down, 0, 1) {
		fmt.Fprintf(c.log, "sluice: redis %s unavailable, circuit breaker open: %v; requests are decided by onStoreError or the fallback until it answers\n", c.opts.name, err)
	}
}

// close closes the connections, waiting for calls in progress. The client
// stays usable: the next call connects again. The registry closes a
// client when it drops the last entry using it, and a dropped entry may
// still serve requests (Traefik says nothing when it stops using a
// middleware); such an entry then reconnects, and only an entry no
// longer used leaves no connection open.
func (c *redisClient) close() {
	c.lazy.Close()
}
