package caddymodule

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
)

// RedisStoreConfig configures a Redis store. Exactly one of Address,
// Addresses and Sentinel says where Redis is. Address, Addresses, Sentinel,
// Username, Password and the TLS file names may contain global placeholders
// such as {env.REDIS_PASSWORD}, expanded once when the config loads; a
// username or password that expands to nothing fails the load.
type RedisStoreConfig struct {
	// Address is the host:port of a standalone server.
	Address string `json:"address,omitempty"`
	// Addresses are host:port seed nodes of a Redis Cluster; the client
	// discovers the others.
	Addresses []string `json:"addresses,omitempty"`
	// Sentinel names a master monitored by Redis Sentinel.
	Sentinel *SentinelConfig `json:"sentinel,omitempty"`

	// Username, with Password, authenticates as an ACL user (Redis 6 and
	// later); empty means the default user.
	Username string `json:"username,omitempty"`
	// Password authenticates the connection (AUTH).
	Password string `json:"password,omitempty"`
	// DB is the database number; not with Addresses (a Cluster has only
	// database 0).
	DB int `json:"db,omitempty"`
	// TLS, when present, connects with TLS.
	TLS *RedisTLSConfig `json:"tls,omitempty"`

	// Timeout bounds each decision's round trip to Redis, connecting
	// included; when it passes, the request is decided by the fallback or
	// on_store_error. Default 100ms.
	Timeout caddy.Duration `json:"timeout,omitempty"`
	// PoolSize is the number of connections per server; default ten per
	// CPU.
	PoolSize int `json:"pool_size,omitempty"`
	// Prefix begins every key sluice writes; default "sluice:". Instances
	// sharing counters must use the same prefix. It must not contain
	// braces.
	Prefix string `json:"prefix,omitempty"`
	// ReadableKeys puts the clients' keys (their addresses, API keys) in
	// the names of the Redis keys, for debugging; by default the names
	// carry a digest of each, so that Redis holds no client identity.
	ReadableKeys bool `json:"readable_keys,omitempty"`
	// LeaseTTL is how long the lease of a max_in_flight slot lives in
	// Redis unless renewed: the handler renews the leases of a request
	// every third of it while the request lasts, and a Caddy that crashed
	// leaves its slots taken for at most this long. Default: the server's
	// write_timeout and 5s more, or, without a write_timeout, 35s.
	LeaseTTL caddy.Duration `json:"lease_ttl,omitempty"`
	// Breaker is the circuit breaker in front of the store; absent means
	// 5 consecutive failures open it for 1s.
	Breaker *BreakerConfig `json:"breaker,omitempty"`
}

// SentinelConfig locates a master through Redis Sentinel. The Sentinels
// themselves are contacted without credentials.
type SentinelConfig struct {
	// Master is the name of the master set.
	Master string `json:"master,omitempty"`
	// Addresses are host:port of Sentinels.
	Addresses []string `json:"addresses,omitempty"`
}

// RedisTLSConfig configures TLS to Redis. The zero value verifies the
// server against the system's roots.
type RedisTLSConfig struct {
	// CA is the certificate authorities to trust instead of the
	// system's: a PEM file, or the PEM text itself.
	CA string `json:"ca,omitempty"`
	// Cert is a client certificate, for servers that require one: a PEM
	// file or the PEM text itself. Cert and Key go together.
	Cert string `json:"cert,omitempty"`
	// Key is Cert's private key: a PEM file or the PEM text itself.
	Key string `json:"key,omitempty"`
	// ServerName is the name to verify the server's certificate against;
	// default the host of the address.
	ServerName string `json:"server_name,omitempty"`
	// InsecureSkipVerify accepts any server certificate. For tests only.
	InsecureSkipVerify bool `json:"insecure_skip_verify,omitempty"`
}

// BreakerConfig configures the circuit breaker in front of a Redis store:
// after Failures consecutive failed calls it stops calling Redis for
// Backoff, deciding requests by the fallback or on_store_error at once,
// then lets one probe call through.
type BreakerConfig struct {
	// Failures is the number of consecutive failures that opens the
	// breaker; default 5.
	Failures int `json:"failures,omitempty"`
	// Backoff is how long it stays open; default 1s.
	Backoff caddy.Duration `json:"backoff,omitempty"`
}

// validate checks c without building anything. Addresses holding a
// placeholder are checked by resolve, once expanded.
func (c *RedisStoreConfig) validate() error {
	n := 0
	if c.Address != "" {
		n++
	}
	if len(c.Addresses) > 0 {
		n++
	}
	if c.Sentinel != nil {
		n++
		if c.Sentinel.Master == "" {
			return optionErrorf("sentinel", "store.redis.sentinel.master: required, the name of the master set")
		}
		if len(c.Sentinel.Addresses) == 0 {
			return optionErrorf("sentinel", "store.redis.sentinel.addresses: at least one Sentinel host:port is required")
		}
	}
	if n != 1 {
		return errors.New("store.redis: set exactly one of address, addresses (Cluster) and sentinel")
	}
	if err := c.checkAddresses(false); err != nil {
		return err
	}
	if err := redisstore.CheckDB(c.DB, len(c.Addresses) > 0); err != nil {
		return redisError(err)
	}
	if err := redisstore.CheckUser(c.Username, c.Password); err != nil {
		return redisError(err)
	}
	if c.Timeout < 0 {
		return optionErrorf("timeout", "store.redis.timeout: must not be negative")
	}
	if c.PoolSize < 0 {
		return optionErrorf("pool_size", "store.redis.pool_size: must not be negative")
	}
	if c.LeaseTTL < 0 {
		return optionErrorf("lease_ttl", "store.redis.lease_ttl: must not be negative")
	}
	if b := c.Breaker; b != nil && b.Failures < 0 {
		return optionErrorf("breaker", "store.redis.breaker.failures: must not be negative")
	}
	if b := c.Breaker; b != nil && b.Backoff < 0 {
		return optionErrorf("breaker", "store.redis.breaker.backoff: must not be negative")
	}
	if t := c.TLS; t != nil && (t.Cert == "") != (t.Key == "") {
		return optionErrorf("tls", "store.redis.tls: cert and key go together")
	}
	if err := redisstore.CheckPrefix(c.Prefix); err != nil {
		return redisError(err)
	}
	return nil
}

// redisError is err, a check's error of the redis block, under
// store.redis.: about the subdirective of the same name as its field when
// it is a model.FieldError.
func redisError(err error) error {
	wrapped := fmt.Errorf("store.redis.%w", err)
	if fe := model.FieldOf(err); fe != nil {
		return &optionError{option: fe.Field, err: wrapped}
	}
	return wrapped
}

// checkAddresses checks that every address is host:port; unless expanded,
// it skips those holding a placeholder.
func (c *RedisStoreConfig) checkAddresses(expanded bool) error {
	check := func(sub, option, a string) error {
		if !expanded && strings.Contains(a, "{") {
			return nil
		}
		if err := redisstore.CheckAddress(a); err != nil {
			return &optionError{option: sub, err: errors.New(model.FieldOf(err).Format("store.redis."+option, ""))}
		}
		return nil
	}
	if c.Address != "" {
		if err := check("address", "address", c.Address); err != nil {
			return err
		}
	}
	for _, a := range c.Addresses {
		if err := check("addresses", "addresses", a); err != nil {
			return err
		}
	}
	if c.Sentinel != nil {
		for _, a := range c.Sentinel.Addresses {
			if err := check("sentinel", "sentinel.addresses", a); err != nil {
				return err
			}
		}
	}
	return nil
}

// resolve returns a copy of c with its placeholders expanded and its
// defaults filled in.
func (c *RedisStoreConfig) resolve() (*RedisStoreConfig, error) {
	if err := c.validate(); err != nil {
		return nil, err // Caddy validates after provisioning
	}
	repl := caddy.NewReplacer()
	expand := func(s string) string { return repl.ReplaceKnown(s, "") }
	r := *c
	r.Address = expand(c.Address)
	r.Addresses = make([]string, len(c.Addresses))
	for i, a := range c.Addresses {
		r.Addresses[i] = expand(a)
	}
	if c.Sentinel != nil {
		s := SentinelConfig{Master: expand(c.Sentinel.Master), Addresses: make([]string, len(c.Sentinel.Addresses))}
		for i, a := range c.Sentinel.Addresses {
			s.Addresses[i] = expand(a)
		}
		r.Sentinel = &s
	}
	r.Username = expand(c.Username)
	r.Password = expand(c.Password)
	if c.TLS != nil {
		t := *c.TLS
		t.CA, t.Cert, t.Key, t.ServerName = expand(t.CA), expand(t.Cert), expand(t.Key), expand(t.ServerName)
		r.TLS = &t
	}
	if r.Timeout == 0 {
		r.Timeout = caddy.Duration(redisstore.DefaultTimeout)
	}
	if r.Prefix == "" {
		r.Prefix = redisstore.DefaultPrefix
	}
	if c.Address != "" && r.Address == "" {
		return nil, fmt.Errorf("store.redis.address %q: expands to nothing", c.Address)
	}
	// A credential from an unset variable is a deployment mistake: without
	// it Redis refuses every command, and on_store_error decides every
	// request. Refused at load, as the Traefik plugin refuses env:NAME.
	for _, o := range [...]struct{ name, set, got string }{{"username", c.Username, r.Username}, {"password", c.Password, r.Password}} {
		if o.set != "" && o.got == "" {
			return nil, fmt.Errorf("store.redis.%s %q: expands to nothing (an environment variable not set or empty?); set it, or remove %s", o.name, o.set, o.name)
		}
	}
	if err := r.checkAddresses(true); err != nil {
		return nil, err
	}
	return &r, nil
}

// poolKey identifies the store c configures: every setting, with the
// password replaced by its SHA-256 so the key holds no secret.
func (c *RedisStoreConfig) poolKey() string {
	k := *c
	k.LeaseTTL = 0 // the handler's, not the client's
	if k.Password != "" {
		sum := sha256.Sum256([]byte(k.Password))
		k.Password = hex.EncodeToString(sum[:])
	}
	b, _ := json.Marshal(&k) // cannot fail: strings, numbers and slices only
	return "redis:" + string(b)
}

// label names the store in metrics, without credentials but with what
// else tells two stores on one server apart (prefix, user, TLS), so that
// each store's breaker has a gauge of its own.
func (c *RedisStoreConfig) label() string {
	var l string
	switch {
	case len(c.Addresses) > 0:
		l = "redis-cluster " + strings.Join(c.Addresses, ",")
	case c.Sentinel != nil:
		l = "redis-sentinel " + c.Sentinel.Master + "@" + strings.Join(c.Sentinel.Addresses, ",")
	default:
		l = "redis " + c.Address + "/" + strconv.Itoa(c.DB)
	}
	if c.Prefix != redisstore.DefaultPrefix {
		l += " prefix=" + c.Prefix
	}
	if c.Username != "" {
		l += " user=" + c.Username
	}
	if c.TLS != nil {
		l += " tls"
	}
	return l
}

// tlsConfig builds the client's TLS configuration, or nil without TLS.
func (c *RedisStoreConfig) tlsConfig() (*tls.Config, error) {
	t := c.TLS
	if t == nil {
		return nil, nil
	}
	cfg, err := redisstore.TLSConfig(t.CA, t.Cert, t.Key, t.InsecureSkipVerify, t.ServerName)
	if err != nil {
		return nil, fmt.Errorf("store.redis.tls: %w", err)
	}
	return cfg, nil
}

// directDecisions is how many decisions the module sends at once on
// connections of their own, each one round trip; beyond it, they ride
// go-redis's automatic pipelining. BenchmarkRedisBatching measured on two
// cores, against one round trip per decision: 1.00× at 1 caller, 1.15× at
// 8 and 64; all of them batched: 0.74× at 1 caller (the pipeline's
// goroutine is one more hop), 0.89× at 8, 1.36× at 64.
const directDecisions = 4

// newRedisStore builds the go-redis client c describes and the core store
// over it, sending at most direct decisions at once outside the automatic
// pipeline (directDecisions; the benchmark varies it). It does not contact
// Redis: a server down at startup is an outage like any other, handled per
// request.
func newRedisStore(c *RedisStoreConfig, direct int64) (*pooledStore, error) {
	routeRedisLog()
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	timeout := time.Duration(c.Timeout)
	// Retries are off: a reply lost after the script ran would charge a
	// retried request twice. MaxRetries -1 turns them off for a server and
	// Sentinel, not for a Cluster, whose retries are MaxRedirects's: each
	// script call is an evalCmd, which go-redis never sends again once it
	// may have run. So are dial retries (go-redis retries a
	// failed dial 5 times, 100ms apart): within one decision's Timeout
	// they only add failed dials, and once a pool has counted pool_size of
	// them go-redis stops dialing and retries once a second on its own, so
	// a Redis back from an outage would wait for that and then for the
	// breaker's next probe. Deadlines come from the request's context,
	// bounded by Timeout. RESP2 keeps script replies in the types
	// model.Scripter documents; CLIENT SETINFO is not sent because servers
	// before 7.2 refuse it.
	opts := &redis.UniversalOptions{
		Username:              c.Username,
		Password:              c.Password,
		DB:                    c.DB,
		TLSConfig:             tlsCfg,
		PoolSize:              c.PoolSize,
		Protocol:              2,
		MaxRetries:            -1,
		DialerRetries:         1,
		DialTimeout:           timeout,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		ContextTimeoutEnabled: true,
		DisableIdentity:       true,
	}
	// unsentHook goes on the clients that write to a connection: a
	// Cluster's clients of its nodes (none exists before the first
	// command), or the one client.
	var client redis.UniversalClient
	cluster := false
	switch {
	case len(c.Addresses) > 0:
		opts.Addrs = c.Addresses
		cc := redis.NewClusterClient(opts.Cluster())
		cc.OnNewNode(func(node *redis.Client) { node.AddHook(unsentHook{}) })
		client = cc
		cluster = true
	case c.Sentinel != nil:
		opts.Addrs = c.Sentinel.Addresses
		opts.MasterName = c.Sentinel.Master
		client = redis.NewFailoverClient(opts.Failover())
		client.AddHook(unsentHook{})
	default:
		opts.Addrs = []string{c.Address}
		client = redis.NewClient(opts.Simple())
		client.AddHook(unsentHook{})
	}
	// Decisions beyond the first direct in flight ride go-redis's
	// automatic pipelining: those that arrive while a batch is in flight
	// go together in the next one (no timer). The deferred face lets each
	// decision stop waiting at its own deadline; the retries it could make
	// are off (evalCmd), and a decision whose deadline passed while it was
	// queued is not written (unsentHook). The pipeline is half-duplex, as
	// by default: the full-duplex one writes a command before the hooks
	// run.
	ap, err := client.AsyncAutoPipeline()
	if err != nil {
		client.Close()
		return nil, fmt.Errorf("store.redis: %w", err)
	}
	st, err := redisstore.New(redisstore.Config{Client: scripter{c: client, ap: ap, direct: new(int64), max: direct}, Prefix: c.Prefix, Cluster: cluster, ReadableKeys: c.ReadableKeys})
	if err != nil {
		client.Close()
		return nil, err
	}
	var b core.Breaker
	if c.Breaker != nil {
		b.Failures, b.Backoff = c.Breaker.Failures, time.Duration(c.Breaker.Backoff)
	}
	return &pooledStore{store: st, timeout: timeout, breaker: &b, label: c.label(), close: client.Close}, nil
}

// scripter adapts a go-redis client to model.Scripter. A cluster client
// routes each EVALSHA by its keys and loads scripts on every node.
type scripter struct {
	c  redis.UniversalClient
	ap *redis.AutoPipeliner // c's deferred autopipeliner, for EVALSHA
	// direct counts the EVALSHAs in flight outside ap: while there are
	// fewer than max, a decision goes straight to a pooled connection, as
	// one round trip, and the others to ap, as core/resp batches only the
	// commands that find every connection of its pool busy.
	direct *int64
	max    int64
}

// EvalSha runs EVALSHA, on a connection of its own or in c's automatic
// pipeline (see direct), waiting for its reply until ctx ends. A nil reply
// is (nil, nil); a Redis error reply is returned as go-redis's error,
// whose text is the reply's.
//
// A call is sent once (evalCmd). When ctx ends before the reply comes,
// the failure policy answers the request, and what Redis does depends on
// where the call was: one still waiting in the automatic pipeline is
// never written (unsentHook); one already written may run, charging the
// request (or taking its slot until the lease expires) although the
// policy answered it. That charge counts a request that was answered
// without Redis, so Redis admits less afterwards, never more: the
// admissions stay within what the failure policy documents.
func (s scripter) EvalSha(ctx context.Context, sha string, keys, args []string) (interface{}, error) {
	a := make([]interface{}, 0, 3+len(keys)+len(args))
	a = append(a, "evalsha", sha, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	for _, v := range args {
		a = append(a, v)
	}
	cmd := &evalCmd{Cmd: redis.NewCmd(ctx, a...), ctx: ctx}
	var err error
	if atomic.AddInt64(s.direct, 1) <= s.max {
		err = s.c.Process(ctx, cmd)
		atomic.AddInt64(s.direct, -1)
	} else {
		atomic.AddInt64(s.direct, -1)
		err = s.ap.Submit(ctx, cmd).WaitContext(ctx)
	}
	if err != nil && err != redis.Nil {
		return nil, err
	}
	v, err := cmd.Result()
	if err == redis.Nil {
		return nil, nil
	}
	return v, err
}

// evalCmd is a script call that go-redis sends once: a script whose reply
// is lost may have run, and run again it would charge its request twice
// (or take a second slot, or refund twice).
//
// MaxRetries -1 leaves a server's and a Sentinel's client one attempt per
// call, but a ClusterClient (go-redis v9.23) retries by MaxRedirects, 3
// by default: it sends a call again after a network error or a timeout,
// on the same node a few milliseconds later, then on another; and its
// pipeline, which also carries the automatic pipeline's batches, sends a
// node's whole batch again after an error writing it, after a read error
// (the calls whose replies were read included), and when its first reply
// is a CLUSTERDOWN, TRYAGAIN, LOADING, MASTERDOWN, READONLY or "max
// number of clients" error (the other calls, which ran, included).
// NoRetry turns off every one of these. It leaves the retries after a
// reply that says the script did not run: a MOVED or ASK reply, Redis
// refusing the call on that node, followed MaxRedirects times at most;
// and, for a call sent alone, the READONLY reply of a node that has
// become a replica, where the script could write nothing.
type evalCmd struct {
	*redis.Cmd
	// ctx is the caller's: once it has ended, the caller has its answer
	// and the call is not written (unsentHook).
	ctx context.Context
}

// NoRetry tells go-redis never to send c again after an attempt that may
// have written it.
func (c *evalCmd) NoRetry() bool { return true }

// unsentHook fails, without writing it, a script call whose caller's
// context has ended. go-redis's automatic pipeline runs a queued command
// on a context of its own, not its caller's: a call queued behind a slow
// batch would be written once that batch is done, however long after its
// caller stopped waiting and the failure policy answered its request,
// and charge that request, or take a slot nobody holds. The hook runs as
// the client hands each command, or each batch (a redirected one
// included), to a connection; a call whose context ends after that,
// while its batch gets a connection or is on the wire, may run, as any
// decision in flight when its deadline passes (see scripter.EvalSha).
type unsentHook struct{}

// DialHook is next.
func (unsentHook) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook fails cmd without sending it if its caller has gone.
func (unsentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := abandoned(cmd); err != nil {
			return err
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook fails the commands of cmds whose callers have gone
// and sends the others.
func (unsentHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var live []redis.Cmder // nil while every command is
		for i, cmd := range cmds {
			if err := abandoned(cmd); err != nil {
				cmd.SetErr(err)
				if live == nil {
					live = append(make([]redis.Cmder, 0, len(cmds)), cmds[:i]...)
				}
			} else if live != nil {
				live = append(live, cmd)
			}
		}
		switch {
		case live == nil:
			return next(ctx, cmds)
		case len(live) == 0:
			return nil // each has its error
		default:
			return next(ctx, live)
		}
	}
}

// abandoned is the error of cmd's caller's context when cmd is a script
// call whose caller has gone, else nil.
func abandoned(cmd redis.Cmder) error {
	if c, ok := cmd.(*evalCmd); ok {
		return c.ctx.Err()
	}
	return nil
}

// ScriptLoad runs SCRIPT LOAD, on every node of a cluster.
func (s scripter) ScriptLoad(ctx context.Context, script string) (string, error) {
	return s.c.ScriptLoad(ctx, script).Result()
}

// Interface guards
var (
	_ model.Scripter   = scripter{}
	_ caddy.Destructor = (*pooledStore)(nil)
)
