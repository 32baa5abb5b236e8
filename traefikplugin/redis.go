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
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/resp"
)

// defaultRedisEndpoint is Traefik's default rateLimit.redis.endpoints.
const defaultRedisEndpoint = "localhost:6379"

// redialEvery is the least time between two attempts to connect a Redis
// client that has never connected, so that a Redis down at startup costs
// one failed dial per second, not one per request.
const redialEvery = time.Second

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
		if err := core.CheckRedisAddress(e); err != nil {
			return nil, errors.New(core.FieldOf(err).Format("redis.endpoints", ""))
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
	if err := core.CheckRedisUser(o.resp.Username, pw); err != nil {
		return nil, fieldError("redis.", err)
	}
	if o.resp.DB, err = parseInt("redis.db", r.DB, 0, 0, 1<<20); err != nil {
		return nil, err
	}
	if err := core.CheckRedisDB(o.resp.DB, o.seeds != nil); err != nil {
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
	o.timeout = orDefault(o.timeout, core.DefaultRedisTimeout)
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
	if err := core.CheckRedisSentinel(so.MasterName, so.Addrs); err != nil {
		return nil, fieldError("", err)
	}
	pw, err := secret("redis.sentinel.password", r.Password)
	if err != nil {
		return nil, err
	}
	so.Password = pw
	if err := core.CheckRedisUser(so.Username, pw); err != nil {
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

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// parseTLS builds the client TLS configuration as Traefik's ClientTLS does:
// CA, Cert and Key are file paths, or else the PEM text itself.
func parseTLS(t *RedisTLS) (*tls.Config, error) {
	insecure, err := parseBool("redis.tls.insecureSkipVerify", t.InsecureSkipVerify)
	if err != nil {
		return nil, err
	}
	c, err := core.TLSConfig(t.CA, t.Cert, t.Key, insecure, "")
	if err != nil {
		return nil, fieldError("", err)
	}
	return c, nil
}

// redisConn is a connected Redis client: a *resp.Client, a *resp.Cluster
// for several endpoints, or a *resp.Sentinel.
type redisConn interface {
	EvalSha(ctx context.Context, sha string, keys []string, args []string) (interface{}, error)
	ScriptLoad(ctx context.Context, script string) (string, error)
	Close() error
}

// redisClient is a Redis connection pool (one per master of a Redis
// Cluster) shared by every middleware with the same connection settings, with the store, the circuit breaker and the
// outage report that go with it. It implements core.Scripter, connecting
// on demand: a client whose server was down when the middleware was created
// keeps trying, at most once per redialEvery, from the request path; and a
// client whose connections the registry closed (it dropped the client's
// last entry, which Traefik may still route to) connects again when used.
type redisClient struct {
	opts  redisOptions
	clock core.Clock
	log   io.Writer // stderr: outages and recoveries

	store   *core.RedisStore
	breaker core.Breaker
	// direct holds client while it is a standalone server's *resp.Client,
	// for the store to send its common decisions to without EvalSha.
	direct core.RedisDirect

	mu       sync.Mutex
	client   redisConn // nil until connected and after close
	dialing  bool
	dialed   chan struct{} // closed when the dial under way ends
	lastDial int64         // instant of the last failed dial
	lastErr  error
	gen      uint64 // counts close calls: a dial that spans one is not kept
	refs     int    // registry entries using it; under the registry's lock

	down int32 // atomic; 1 while an outage has been reported
}

// errNotConnected is the store error while no connection could be opened.
var errNotConnected = errors.New("not connected")

// newRedisClient returns a client for o, trying to connect once within o's
// dial timeout. A failure is reported on log and is not an error: requests
// are then decided by the middleware's failure policy until the server
// answers.
func newRedisClient(ctx context.Context, o *redisOptions, clock core.Clock, log io.Writer) (*redisClient, error) {
	c := &redisClient{opts: *o, clock: clock, log: log}
	st, err := core.NewRedisStore(core.RedisConfig{Client: c, Cluster: o.seeds != nil, ReadableKeys: o.readable, Direct: &c.direct})
	if err != nil {
		return nil, err
	}
	c.store = st
	if _, err := c.connect(ctx); err != nil {
		atomic.StoreInt32(&c.down, 1)
		fmt.Fprintf(log, "sluice: redis %s unavailable: %v; requests are decided by onStoreError or the fallback until it answers\n", o.name, err)
	}
	return c, nil
}

// connect returns the connected client, dialing if there is none and the
// last attempt is at least redialEvery old. While a dial is under way,
// callers fail at once if the last dial failed (the server is down), and
// otherwise (close dropped the connections) wait for it, within ctx.
func (c *redisClient) connect(ctx context.Context) (redisConn, error) {
	c.mu.Lock()
	if cl := c.client; cl != nil {
		c.mu.Unlock()
		return cl, nil
	}
	if c.dialing && c.lastErr == nil {
		done := c.dialed
		c.mu.Unlock()
		select {
		case <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("redis %s: %w", c.opts.name, ctx.Err())
		}
		c.mu.Lock()
		if cl := c.client; cl != nil {
			c.mu.Unlock()
			return cl, nil
		}
	}
	now := c.clock()
	if c.dialing || (c.lastErr != nil && now-c.lastDial < int64(redialEvery)) {
		err := c.lastErr
		c.mu.Unlock()
		if err == nil {
			err = errNotConnected
		}
		return nil, fmt.Errorf("redis %s: %w", c.opts.name, err)
	}
	c.dialing = true
	c.dialed = make(chan struct{})
	gen := c.gen
	c.mu.Unlock()

	cl, err := c.dial(ctx)

	c.mu.Lock()
	c.dialing = false
	close(c.dialed)
	if err != nil {
		c.lastDial, c.lastErr = now, err
		c.mu.Unlock()
		return nil, err
	}
	if c.gen != gen {
		// close ran while dialing: keeping this pool would leave it open
		// after close. The caller may connect again.
		c.mu.Unlock()
		cl.Close()
		return nil, resp.ErrClosed
	}
	// One field per statement: Yaegi v0.16.1 panics on a nil in a tuple
	// assignment to fields.
	c.client = cl
	c.lastErr = nil
	if one, ok := cl.(*resp.Client); ok {
		c.direct.Set(one)
	}
	c.mu.Unlock()
	return cl, nil
}

// dial opens a client: of a standalone server, or of the master that Redis
// Sentinels name, within the dial timeout, or of a Redis Cluster (reading its slot map and connecting to every master)
// within the timeout of one decision.
func (c *redisClient) dial(ctx context.Context) (redisConn, error) {
	if so := c.opts.sentinel; so != nil {
		dctx, cancel := context.WithTimeout(ctx, orDefault(c.opts.resp.DialTimeout, resp.DefaultDialTimeout))
		defer cancel()
		sc, err := resp.NewSentinel(dctx, *so, c.opts.resp)
		if err != nil {
			return nil, err
		}
		return sc, nil
	}
	if c.opts.seeds == nil {
		dctx, cancel := context.WithTimeout(ctx, orDefault(c.opts.resp.DialTimeout, resp.DefaultDialTimeout))
		defer cancel()
		cl, err := resp.New(dctx, c.opts.resp)
		if err != nil {
			return nil, err
		}
		return cl, nil
	}
	dctx, cancel := context.WithTimeout(ctx, c.opts.timeout)
	defer cancel()
	cc, err := resp.NewCluster(dctx, c.opts.seeds, c.opts.resp)
	if err != nil {
		return nil, err
	}
	return cc, nil
}

// EvalSha implements core.Scripter. A call whose connections close closed,
// while it dialed them or before it sent the command, runs once more on
// new ones: ErrClosed means the command was not sent.
//
// It holds the common case, a connected client that runs the command: a
// standalone server's client is called through a method expression, and
// connecting and retrying are in evalShaSlow, since under Yaegi a method
// call costs four times a function's and every call pays for every value
// of the callee's body. (A standalone server's common decisions do not
// come here: the store sends them to the client that c.direct holds.)
func (c *redisClient) EvalSha(ctx context.Context, sha string, keys []string, args []string) (interface{}, error) {
	c.mu.Lock()
	cl := c.client
	c.mu.Unlock()
	if cl == nil {
		return evalShaSlow(c, ctx, sha, keys, args)
	}
	var v interface{}
	var err error
	if one, ok := cl.(*resp.Client); ok {
		v, err = (*resp.Client).EvalSha(one, ctx, sha, keys, args)
	} else {
		v, err = cl.EvalSha(ctx, sha, keys, args)
	}
	if err == resp.ErrClosed {
		return evalShaSlow(c, ctx, sha, keys, args)
	}
	return v, err
}

// evalShaSlow is EvalSha connecting first, and once more after ErrClosed.
func evalShaSlow(c *redisClient, ctx context.Context, sha string, keys []string, args []string) (interface{}, error) {
	cl, err := c.connect(ctx)
	if err == resp.ErrClosed {
		cl, err = c.connect(ctx)
	}
	if err != nil {
		return nil, err
	}
	v, err := cl.EvalSha(ctx, sha, keys, args)
	if err == resp.ErrClosed {
		if cl, err = c.connect(ctx); err != nil {
			return nil, err
		}
		v, err = cl.EvalSha(ctx, sha, keys, args)
	}
	return v, err
}

// ScriptLoad implements core.Scripter, running once more after ErrClosed
// as EvalSha does.
func (c *redisClient) ScriptLoad(ctx context.Context, script string) (string, error) {
	cl, err := c.connect(ctx)
	if err == resp.ErrClosed {
		cl, err = c.connect(ctx)
	}
	if err != nil {
		return "", err
	}
	sha, err := cl.ScriptLoad(ctx, script)
	if err == resp.ErrClosed {
		if cl, err = c.connect(ctx); err != nil {
			return "", err
		}
		sha, err = cl.ScriptLoad(ctx, script)
	}
	return sha, err
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
	c.mu.Lock()
	cl := c.client
	c.client = nil
	c.direct.Set(nil)
	c.gen++
	c.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
}
