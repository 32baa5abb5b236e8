package traefikplugin

import (
	"context"
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
func parseRedis(r *Redis, s *settings, o *options) *redisOptions {
	o.keep(refuseUnsupported(r))
	ro := &redisOptions{}
	endpoints := parseList(r.Endpoints)
	var sentinelID string
	if r.Sentinel != nil {
		if len(endpoints) > 0 {
			o.keep(errors.New("redis.sentinel: set either redis.endpoints or redis.sentinel, not both"))
		}
		so := parseSentinel(r.Sentinel, o)
		if o.err != nil {
			return ro
		}
		ro.sentinel = so
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
			o.keep(errors.New(model.FieldOf(err).Format("redis.endpoints", "")))
		}
	}
	ro.resp.Addr = endpoints[0]
	ro.name = endpoints[0]
	if ro.sentinel != nil {
		ro.name = "master " + ro.sentinel.MasterName + " of sentinels " + strings.Join(ro.sentinel.Addrs, ",")
	}
	if len(endpoints) > 1 {
		ro.seeds = endpoints
		ro.name = "cluster " + strings.Join(endpoints, ",")
		s.notes = append(s.notes, fmt.Sprintf("redis.endpoints lists %d servers: a Redis Cluster seed list, as for the built-in", len(endpoints)))
	}
	ro.resp.Username = strings.TrimSpace(r.Username)
	ro.resp.Password = secret("redis.password", r.Password, o)
	o.keep(fieldError("redis.", redisstore.CheckUser(ro.resp.Username, ro.resp.Password)))
	ro.resp.DB = o.integer("redis.db", r.DB, 0, 1<<20)
	o.keep(fieldError("redis.", redisstore.CheckDB(ro.resp.DB, ro.seeds != nil)))
	ro.resp.PoolSize = o.integer("redis.poolSize", r.PoolSize, 0, 1<<16)
	maxActive := o.integer("redis.maxActiveConns", r.MaxActiveConns, 0, 1<<16)
	if maxActive > 0 && (ro.resp.PoolSize == 0 || maxActive < ro.resp.PoolSize) {
		ro.resp.PoolSize = maxActive
	}
	ro.resp.DialTimeout = o.duration("redis.dialTimeout", r.DialTimeout)
	ro.resp.ReadTimeout = o.duration("redis.readTimeout", r.ReadTimeout)
	ro.resp.WriteTimeout = o.duration("redis.writeTimeout", r.WriteTimeout)
	ro.readable = o.boolean("redis.readableKeys", r.ReadableKeys)
	if ro.timeout = o.duration("redis.timeout", r.Timeout); ro.timeout == 0 {
		ro.timeout = redisstore.DefaultTimeout
	}
	if s.leaseTTL = o.duration("redis.leaseTTL", r.LeaseTTL); s.leaseTTL == 0 && strings.TrimSpace(r.LeaseTTL) != "" {
		o.keep(fmt.Errorf("redis.leaseTTL %q: must be positive", r.LeaseTTL))
	}
	var tlsID string
	if t := r.TLS; t != nil {
		// Traefik's ClientTLS: CA, Cert and Key are file paths, or else
		// the PEM text itself.
		insecure := o.boolean("redis.tls.insecureSkipVerify", t.InsecureSkipVerify)
		var err error
		ro.resp.TLS, err = redisstore.TLSConfig(t.CA, t.Cert, t.Key, insecure, "")
		o.field(err)
		tlsID = strings.Join([]string{t.CA, t.Cert, t.Key, strconv.FormatBool(insecure)}, "\x00")
	}
	// %#v quotes the strings: no two lists of settings read alike.
	ro.id = fmt.Sprintf("%#v", []interface{}{endpoints, ro.resp.Username, ro.resp.Password, ro.resp.DB,
		ro.resp.PoolSize, ro.resp.DialTimeout, ro.resp.ReadTimeout, ro.resp.WriteTimeout, ro.timeout, tlsID, sentinelID, ro.readable})
	return ro
}

// parseSentinel reads redis.sentinel.
func parseSentinel(r *RedisSentinel, o *options) *resp.SentinelOptions {
	so := &resp.SentinelOptions{MasterName: strings.TrimSpace(r.MasterName), Addrs: parseList(r.Endpoints), Username: strings.TrimSpace(r.Username)}
	o.field(redisstore.CheckSentinel(so.MasterName, so.Addrs))
	so.Password = secret("redis.sentinel.password", r.Password, o)
	o.keep(fieldError("redis.sentinel.", redisstore.CheckUser(so.Username, so.Password)))
	return so
}

// secret reads a password option: the text itself, or with "env:NAME" the
// environment variable NAME, which must be set.
func secret(option, v string, o *options) string {
	if !strings.HasPrefix(v, envPrefix) {
		return v
	}
	name := strings.TrimPrefix(v, envPrefix)
	pw := os.Getenv(name)
	if name == "" || pw == "" {
		o.keep(fmt.Errorf("%s: the environment variable %q is not set or empty", option, name))
	}
	return pw
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

// redisClient is a Redis client (a connection pool per master) shared by
// every middleware with the same connection settings, with the store, the
// circuit breaker and the outage report that go with it. Its resp.Lazy
// connects on demand: a client whose server was down when the middleware
// was created keeps trying, at most once per resp.RedialEvery, from the
// request path; and a client whose connections the registry closed (it
// dropped the client's last entry, which Traefik may still route to)
// connects again when used.
type redisClient struct {
	// name, id and timeout are its redisOptions'.
	name    string
	id      string
	timeout time.Duration
	log     io.Writer // stderr: outages and recoveries

	// lazy is the *resp.Lazy the store calls, held as an io.Closer, and
	// store the *redisstore.Store, held as a model.Store: under Yaegi the
	// text of a type spells out every type its fields point to, and a
	// pointer would put a Lazy's or a Store's in the text of every type
	// holding a client (an entry's, a zone's, the registry's).
	lazy    io.Closer
	store   model.Store
	breaker core.Breaker

	refs int   // registry entries using it; under the registry's lock
	down int32 // atomic; 1 while an outage has been reported
}

// newRedisClient returns a client for o, trying to connect once within o's
// dial timeout. A failure is reported on log and is not an error: requests
// are then decided by the middleware's failure policy until the server
// answers.
func newRedisClient(ctx context.Context, o *redisOptions, clock model.Clock, log io.Writer) (*redisClient, error) {
	c := &redisClient{name: o.name, id: o.id, timeout: o.timeout, log: log}
	// direct holds the standalone server's *resp.Client while connected,
	// for the store to send its common decisions to without EvalSha; the
	// lazy client sets it, the store reads it.
	direct := &redisstore.Direct{}
	lazy := resp.NewLazy(resp.Target{Options: o.resp, Seeds: o.seeds, Sentinel: o.sentinel, ClusterTimeout: o.timeout, Name: o.name},
		clock, direct.Set)
	c.lazy = lazy
	st, err := redisstore.New(redisstore.Config{Client: lazy, Cluster: o.seeds != nil, ReadableKeys: o.readable, Direct: direct})
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
			fmt.Fprintf(c.log, "sluice: redis %s available again\n", c.name)
		}
		return
	}
	if !down && c.breaker.State() != core.BreakerClosed && atomic.CompareAndSwapInt32(&c.down, 0, 1) {
		fmt.Fprintf(c.log, "sluice: redis %s unavailable, circuit breaker open: %v; requests are decided by onStoreError or the fallback until it answers\n", c.name, err)
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
