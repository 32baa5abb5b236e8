// Package resp is a small Redis client speaking RESP2 over TCP or TLS,
// written with the standard library only so that Traefik's Yaegi
// interpreter can run it. A Client runs commands on a bounded pool of
// connections and starts no goroutines: a command that finds every
// connection busy is written together with the others waiting, on the
// next connection given back (natural batching, see batched; no pub/sub,
// no blocking commands); a Cluster routes scripts to the masters of a Redis Cluster by
// key slot, following MOVED and ASK redirections; a Sentinel follows the
// master that Redis Sentinels name; a Lazy client connects any of them on
// demand, and again after its server was down or its connections closed.
//
// Replies are decoded as: integer → int64, simple or bulk string → string,
// array → []interface{}, nil bulk string or nil array → nil, error reply →
// [Error], returned as the error (an error nested in an array makes the
// whole reply that error). A [Client] implements model.Scripter.
package resp

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// Options configure a [Client]. The zero value of each optional field
// selects its default.
type Options struct {
	// Addr is the server's "host:port". Required.
	Addr string
	// Username and Password authenticate each new connection: AUTH
	// Username Password for an ACL user, or AUTH Password alone when
	// Username is empty. No AUTH is sent when Password is empty; a
	// Username without a Password is invalid.
	Username, Password string
	// DB is the database selected on each new connection (SELECT); 0, the
	// default, sends no SELECT. Negative is invalid.
	DB int
	// TLS, when not nil, runs TLS over each connection with this
	// configuration. An empty ServerName is set to Addr's host.
	TLS *tls.Config
	// PoolSize is the maximum number of open connections, default 10.
	// Callers beyond it wait for a connection, until their context ends.
	PoolSize int
	// DialTimeout bounds opening a connection: TCP connect, TLS handshake,
	// AUTH and SELECT together. Default 1s.
	DialTimeout time.Duration
	// WriteTimeout and ReadTimeout bound a command: it must be written and
	// its reply read within WriteTimeout+ReadTimeout of its start (one
	// deadline per command keeps the per-command cost low under Yaegi).
	// Defaults 500ms each.
	WriteTimeout, ReadTimeout time.Duration
}

// Defaults of [Options].
const (
	DefaultPoolSize     = 10
	DefaultDialTimeout  = time.Second
	DefaultReadTimeout  = 500 * time.Millisecond
	DefaultWriteTimeout = 500 * time.Millisecond
)

// ErrClosed is returned by calls on a [Client] after Close.
var ErrClosed = errors.New("resp: client closed")

// Client is a pool of connections to one Redis server. It is safe for
// concurrent use. A connection that saw an I/O or protocol error is closed,
// never reused; the next call dials a new one, so a client recovers by
// itself after the server restarts. A command is sent once more only when
// it certainly did not run (see exec), so a call whose connection ends
// after the command was written fails, and a script that charges a limit
// is never charged twice for one call.
//
// A context's deadline bounds a call when earlier than the client's
// timeouts; its cancellation is observed while waiting for a free
// connection and while dialing, not during a command's round trip, which
// the timeouts bound.
type Client struct {
	opts    Options
	timeout time.Duration // WriteTimeout + ReadTimeout
	// The pool: PoolSize entries, each an idle connection (idle), one
	// not opened (free: its taker dials), or in use (the others); a call takes
	// an entry for its whole duration and gives one back (put), so at
	// most PoolSize connections exist. A mutex guards it, not a channel:
	// see package await for why no select may wait on a client's channels.
	mu   sync.Mutex
	idle []*conn
	free int
	// queue holds the commands that found no entry, for the next entry
	// given back to carry together (see execSlow).
	queue  []*call
	closed bool
	// drained, made by Close while entries are busy, is closed when the
	// last one is given back.
	drained chan struct{}
}

// New validates opts and opens one connection, so that a wrong address,
// TLS setting, password or DB index is reported now: the error then says
// what failed, as in "resp: AUTH failed: WRONGPASS ..." or
// "resp: SELECT 99 failed: ERR DB index is out of range". The connection
// is kept in the pool. ctx bounds the connection attempt.
func New(ctx context.Context, opts Options) (*Client, error) {
	if err := opts.normalize(); err != nil {
		return nil, err
	}
	c := &Client{
		opts:    opts,
		timeout: opts.WriteTimeout + opts.ReadTimeout,
	}
	cn, err := dial(ctx, &c.opts)
	if err != nil {
		return nil, err
	}
	// PING reports NOAUTH when the server wants a password none was
	// given for, and garbage when a plain client reached a TLS port.
	if err := cn.setup(c.deadline(ctx), []string{"PING"}, "PING"); err != nil {
		return nil, err
	}
	c.idle = append(c.idle, cn)
	c.free = opts.PoolSize - 1
	return c, nil
}

// normalize validates o and fills in its defaults.
func (o *Options) normalize() error {
	host, _, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return fmt.Errorf("resp: Addr %q: %w", o.Addr, err)
	}
	switch {
	case o.Username != "" && o.Password == "":
		return errors.New("resp: Username without Password")
	case o.DB < 0:
		return fmt.Errorf("resp: negative DB %d", o.DB)
	case o.PoolSize < 0:
		return fmt.Errorf("resp: negative PoolSize %d", o.PoolSize)
	case o.DialTimeout < 0 || o.ReadTimeout < 0 || o.WriteTimeout < 0:
		return errors.New("resp: negative timeout")
	}
	if o.PoolSize == 0 {
		o.PoolSize = DefaultPoolSize
	}
	if o.DialTimeout == 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.ReadTimeout == 0 {
		o.ReadTimeout = DefaultReadTimeout
	}
	if o.WriteTimeout == 0 {
		o.WriteTimeout = DefaultWriteTimeout
	}
	if o.TLS != nil && o.TLS.ServerName == "" {
		o.TLS = o.TLS.Clone()
		o.TLS.ServerName = host
	}
	return nil
}

// Do sends the command args (name first, as in "SET", "k", "v") and
// returns its decoded reply. An error reply is returned as an [Error];
// other errors are I/O, protocol, context or pool errors.
func (c *Client) Do(ctx context.Context, args ...string) (interface{}, error) {
	if len(args) == 0 {
		return nil, errors.New("resp: Do without a command")
	}
	return exec(c, ctx, args, nil, nil)
}

// digits holds the decimal forms of 0 to 9, for the common small key counts.
const digits = "0123456789"

// EvalSha runs EVALSHA sha with keys and args and returns the script's
// decoded reply. A script not loaded on the server yields an [Error]
// starting with "NOSCRIPT"; reloading it is the caller's business.
func (c *Client) EvalSha(ctx context.Context, sha string, keys []string, args []string) (interface{}, error) {
	var n string
	if len(keys) < 10 {
		n = digits[len(keys) : len(keys)+1]
	} else {
		n = strconv.Itoa(len(keys))
	}
	head := [3]string{"EVALSHA", sha, n}
	return exec(c, ctx, head[:], keys, args)
}

// Run sends cmd, a command already encoded as a RESP array of bulk
// strings (see AppendCommand) and named name (for errors), and returns its
// decoded reply, as Do would. It is for a caller that sends commands made
// of the same arguments but for a few bytes, such as the Redis store's
// take script for one limit, and saves it encoding them each time; the
// reply is expected to be a bulk string, other ones cost a little more.
//
// The command must end within timeout of start, when timeout is positive,
// as if ctx had that deadline: start is the instant the caller's work
// began, and bounds the client's own timeouts too. Only a call that must
// wait for a connection, dial one, or fail creates a context with that
// deadline: under Yaegi that costs more than the command itself.
//
// It is a function: under Yaegi a method call costs four times as much.
func Run(c *Client, ctx context.Context, start time.Time, timeout time.Duration, name string, cmd []byte) (v interface{}, err error) {
	c.mu.Lock()
	n := len(c.idle) - 1
	if n < 0 || c.closed {
		c.mu.Unlock()
		return runSlow(c, ctx, start, timeout, name, cmd, nil, false, nil)
	}
	cn := c.idle[n]
	c.idle = c.idle[:n]
	c.mu.Unlock()
	d := c.timeout
	if timeout > 0 && timeout < d {
		d = timeout
	}
	deadline := start.Add(d)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	if err = cn.nc.SetDeadline(deadline); err != nil {
		return runSlow(c, ctx, start, timeout, name, cmd, cn, false, err)
	}
	if _, err = cn.nc.Write(cmd); err != nil {
		return runSlow(c, ctx, start, timeout, name, cmd, cn, false, err)
	}
	if v, err = readText(cn.br); err != nil {
		return runSlow(c, ctx, start, timeout, name, cmd, cn, true, err)
	}
	c.mu.Lock()
	if len(c.queue) != 0 || c.closed {
		putSlow(c, cn)
		return v, nil
	}
	c.idle = append(c.idle, cn)
	c.mu.Unlock()
	return v, nil
}

// runSlow is Run for a call that did not simply succeed on an idle
// connection, with ctx bounded by the call's timeout: when cn is nil, a
// call that found no idle connection, and else one that failed with err
// on cn (sent says whether the command may have reached the server).
func runSlow(c *Client, ctx context.Context, start time.Time, timeout time.Duration, name string, cmd []byte, cn *conn, sent bool, err error) (interface{}, error) {
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, start.Add(timeout))
		defer cancel()
	}
	if cn == nil {
		return execSlow(c, ctx, []string{name}, nil, nil, cmd)
	}
	return execFailed(c, ctx, cn, true, sent, err, []string{name}, nil, nil, cmd)
}

// AppendCommand appends the command args (name first) to buf, encoded as
// a RESP array of bulk strings, the form Run sends.
func AppendCommand(buf []byte, args ...string) []byte {
	return appendCommand(buf, args, nil, nil)
}

// ScriptLoad loads script into the server's script cache (SCRIPT LOAD)
// and returns its SHA-1 in hexadecimal.
func (c *Client) ScriptLoad(ctx context.Context, script string) (string, error) {
	v, err := exec(c, ctx, []string{"SCRIPT", "LOAD", script}, nil, nil)
	if err != nil {
		return "", err
	}
	sha, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("resp: SCRIPT LOAD: unexpected reply %T", v)
	}
	return sha, nil
}

// Close closes the client's connections, waiting for calls in progress to
// finish (each is bounded by its timeouts). Calls that start after Close,
// and commands still waiting for a connection, fail with ErrClosed. Close
// is idempotent and always returns nil.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	for _, cn := range c.idle {
		cn.nc.Close()
	}
	c.free += len(c.idle)
	c.idle = nil
	queued := c.queue
	c.queue = nil
	for _, k := range queued {
		k.queued = false
	}
	var drained chan struct{}
	if c.free < c.opts.PoolSize {
		drained = make(chan struct{})
		c.drained = drained
	}
	c.mu.Unlock()
	failAll(queued, ErrClosed)
	if drained != nil {
		<-drained
	}
	return nil
}

// put gives back the pool entry of a call, cn or nil for one without a
// connection: to the commands queued, which it then carries (see
// execSlow), or to the pool.
func put(c *Client, cn *conn) {
	c.mu.Lock()
	if len(c.queue) == 0 && !c.closed {
		if cn != nil {
			c.idle = append(c.idle, cn)
		} else {
			c.free++
		}
		c.mu.Unlock()
		return
	}
	putSlow(c, cn)
}

// putSlow is put for a client that is closed or has commands queued;
// c.mu is held, and put unlocks it.
func putSlow(c *Client, cn *conn) {
	if c.closed {
		if cn != nil {
			cn.nc.Close()
		}
		c.free++
		if c.free == c.opts.PoolSize && c.drained != nil {
			close(c.drained)
		}
		c.mu.Unlock()
		return
	}
	k := takeBatch(c, cn)
	c.mu.Unlock()
	close(k.done)
}

// exec runs the command made of a, b and c on a pooled connection. When
// writing the command to a reused idle connection fails, the server got at
// most a part of it, which it never runs: the command is sent once more on
// a new connection. A command written whole is never resent, whatever
// follows: if the connection ends before the reply, the server may have
// run it (and a server that restarted, or dropped idle clients, shows the
// same end), so the call fails. Such a failure, and a failed dial, close
// the pool's idle connections too, likely ended the same way, so that the
// calls after it dial new ones instead of failing in turn: after an
// outage, the first call to the server back does not fail on a connection
// from before it.
//
// Under Yaegi every call pays for every value of the called function's
// body, executed or not, and a method call costs four times a function's.
// So exec is a function holding only the common case, an idle connection
// taken at once and a reply without error; waiting, dialing and failures
// are in execSlow and execFailed.
func exec(c *Client, ctx context.Context, a, b, d []string) (interface{}, error) {
	c.mu.Lock()
	n := len(c.idle) - 1
	if n < 0 || c.closed {
		c.mu.Unlock()
		return execSlow(c, ctx, a, b, d, nil)
	}
	cn := c.idle[n]
	c.idle = c.idle[:n]
	c.mu.Unlock()
	deadline := time.Now().Add(c.timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	v, sent, err := roundTrip(cn, deadline, a, b, d, nil)
	if err != nil {
		return execFailed(c, ctx, cn, true, sent, err, a, b, d, nil)
	}
	put(c, cn)
	return v, nil
}

// execSlow is exec for a call that found no idle connection: it runs
// the command on an idle connection given back since, or on a new one if
// the pool has room, and otherwise queues it for the next entry given
// back to carry together with every command queued by then (see
// runBatch). The command is raw, already encoded, when not nil (see Run),
// and else made of a, b and d.
func execSlow(c *Client, ctx context.Context, a, b, d []string, raw []byte) (interface{}, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if n := len(c.idle) - 1; n >= 0 || c.free > 0 {
		var cn *conn
		if n >= 0 {
			cn = c.idle[n]
			c.idle = c.idle[:n]
		} else {
			c.free--
		}
		c.mu.Unlock()
		return c.attempt(ctx, cn, a, b, d, raw)
	}
	return queue(c, ctx, a, b, d, raw)
}

// execFailed finishes a command that failed with err on cn, giving the
// pool entry back: it keeps cn after an error reply, and sends the
// command once more on a new connection when cn was reused and the
// command was not sent (written whole). A command sent whose connection
// failed otherwise than by a deadline closes the idle connections (see
// exec). a[0] names the command.
func execFailed(c *Client, ctx context.Context, cn *conn, reused, sent bool, err error, a, b, d []string, raw []byte) (interface{}, error) {
	if _, ok := err.(Error); ok {
		put(c, cn)
		return nil, err
	}
	cn.nc.Close()
	if reused && !sent {
		return c.attempt(ctx, nil, a, b, d, raw)
	}
	put(c, nil)
	if sent && !errors.Is(err, os.ErrDeadlineExceeded) {
		dropIdle(c)
	}
	return nil, ioError(ctx, a[0], err)
}

// dropIdle closes the idle connections in the pool, leaving their entries
// free for new ones.
func dropIdle(c *Client) {
	c.mu.Lock()
	for _, cn := range c.idle {
		cn.nc.Close()
	}
	c.free += len(c.idle)
	c.idle = c.idle[:0]
	c.mu.Unlock()
}

// attempt runs the command on cn, or on a new connection when cn is nil,
// and gives the pool entry back.
func (c *Client) attempt(ctx context.Context, cn *conn, a, b, d []string, raw []byte) (interface{}, error) {
	reused := cn != nil
	if !reused {
		var err error
		if cn, err = dial(ctx, &c.opts); err != nil {
			put(c, nil)
			dropIdle(c) // likely ended too, as the server is down or gone
			return nil, err
		}
	}
	v, sent, err := roundTrip(cn, c.deadline(ctx), a, b, d, raw)
	if err != nil {
		return execFailed(c, ctx, cn, reused, sent, err, a, b, d, raw)
	}
	put(c, cn)
	return v, nil
}

// deadline returns the deadline of a command starting now: the client's
// timeout, or ctx's deadline when earlier.
func (c *Client) deadline(ctx context.Context) time.Time {
	t := time.Now().Add(c.timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(t) {
		return d
	}
	return t
}

// ioError describes the failure of command name. When ctx has ended, or
// the I/O deadline that expired was ctx's (whose timer may not have fired
// yet), the context's error is the one wrapped.
func ioError(ctx context.Context, name string, err error) error {
	cerr := ctx.Err()
	if cerr == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
			cerr = context.DeadlineExceeded
		}
	}
	if cerr != nil {
		return fmt.Errorf("resp: %s: %w (%v)", name, cerr, err)
	}
	return fmt.Errorf("resp: %s: %w", name, err)
}
