package resp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/await"
)

// RedialEvery is the least time between two attempts of a [Lazy] client
// to connect while its server is down, so that a Redis down at startup
// costs one failed dial per second, not one per call.
const RedialEvery = time.Second

// ErrNotConnected is a [Lazy] call's error while no connection could be
// opened and no dial has failed yet to say why.
var ErrNotConnected = errors.New("not connected")

// Conn is what a [Lazy] client connects: a [*Client], a [*Cluster] or a
// [*Sentinel].
type Conn interface {
	EvalSha(ctx context.Context, sha string, keys []string, args []string) (interface{}, error)
	ScriptLoad(ctx context.Context, script string) (string, error)
	Close() error
}

// Target is what a [Lazy] client connects to: one server, the master
// that Sentinels name, or a Redis Cluster.
type Target struct {
	// Options are the connections' options; Addr is the server's unless
	// Seeds or Sentinel is set.
	Options Options
	// Seeds, when not nil, are the seed addresses of a Redis Cluster.
	Seeds []string
	// Sentinel, when not nil, finds the master through Redis Sentinels.
	Sentinel *SentinelOptions
	// ClusterTimeout bounds connecting to a Cluster: reading its slot map
	// and connecting to every master. Default DefaultDialTimeout.
	ClusterTimeout time.Duration
	// Name designates the target in errors, such as "127.0.0.1:6379".
	Name string
}

// Lazy is a Redis client that connects on demand and connects again after
// Close, for a long-lived user, such as a proxy's middleware, that must
// keep working while Redis is down at its start and after the
// connections it used were closed under it. It implements model.Scripter.
//
// A call finds its connection, dialing it when there is none and the
// last failed dial is at least RedialEvery old; while a dial is under way,
// a call fails at once if the last dial failed (the server is down), and
// otherwise waits for it within its context. A call whose connection
// Close closed, while it dialed or before it sent its command, runs once
// more on a new one: ErrClosed means the command was not sent.
type Lazy struct {
	target Target
	clock  func() int64 // nanoseconds, for RedialEvery
	// onClient, when not nil, is told of the standalone server's client
	// when one is connected, and of nil when it is closed.
	onClient func(*Client)

	mu       sync.Mutex
	conn     Conn // nil until connected and after Close
	dialing  bool
	dialed   chan struct{} // closed when the dial under way ends
	lastDial int64         // instant of the last failed dial
	lastErr  error
	gen      uint64 // counts Close calls: a dial that spans one is not kept
}

// NewLazy returns a client of t that has not connected yet. clock reads
// the time in nanoseconds (nil: the system's); onClient, when not nil, is
// called, with the client's lock held, with the *Client of a standalone
// server each time one is connected, and with nil when Close drops it, so
// that a caller can send its commands to that client directly.
func NewLazy(t Target, clock func() int64, onClient func(*Client)) *Lazy {
	if clock == nil {
		clock = func() int64 { return time.Now().UnixNano() }
	}
	return &Lazy{target: t, clock: clock, onClient: onClient}
}

// Connect returns the connected client, dialing as the type's
// documentation says.
func (c *Lazy) Connect(ctx context.Context) (Conn, error) {
	c.mu.Lock()
	if cn := c.conn; cn != nil {
		c.mu.Unlock()
		return cn, nil
	}
	if c.dialing && c.lastErr == nil {
		done := c.dialed
		c.mu.Unlock()
		if err := await.Closed(ctx, done); err != nil {
			return nil, fmt.Errorf("redis %s: %w", c.target.Name, err)
		}
		c.mu.Lock()
		if cn := c.conn; cn != nil {
			c.mu.Unlock()
			return cn, nil
		}
	}
	now := c.clock()
	if c.dialing || (c.lastErr != nil && now-c.lastDial < int64(RedialEvery)) {
		err := c.lastErr
		c.mu.Unlock()
		if err == nil {
			err = ErrNotConnected
		}
		return nil, fmt.Errorf("redis %s: %w", c.target.Name, err)
	}
	c.dialing = true
	c.dialed = make(chan struct{})
	gen := c.gen
	c.mu.Unlock()

	cn, err := c.dial(ctx)

	c.mu.Lock()
	c.dialing = false
	close(c.dialed)
	if err != nil {
		c.lastDial = now
		c.lastErr = err
		c.mu.Unlock()
		return nil, err
	}
	if c.gen != gen {
		// Close ran while dialing: keeping this client would leave it
		// open after Close. The caller may connect again.
		c.mu.Unlock()
		cn.Close()
		return nil, ErrClosed
	}
	// One field per statement: Yaegi v0.16.1 panics on a nil in a tuple
	// assignment to fields.
	c.conn = cn
	c.lastErr = nil
	if one, ok := cn.(*Client); ok && c.onClient != nil {
		c.onClient(one)
	}
	c.mu.Unlock()
	return cn, nil
}

// dial opens a client of the target: of a standalone server, or of the
// master that Sentinels name, within the dial timeout, or of a Cluster
// within ClusterTimeout.
func (c *Lazy) dial(ctx context.Context) (Conn, error) {
	t := &c.target
	timeout := t.Options.DialTimeout
	if t.Seeds != nil {
		timeout = t.ClusterTimeout
	}
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	switch {
	case t.Sentinel != nil:
		s, err := NewSentinel(ctx, *t.Sentinel, t.Options)
		if err != nil {
			return nil, err
		}
		return s, nil
	case t.Seeds != nil:
		cc, err := NewCluster(ctx, t.Seeds, t.Options)
		if err != nil {
			return nil, err
		}
		return cc, nil
	}
	cl, err := New(ctx, t.Options)
	if err != nil {
		return nil, err
	}
	return cl, nil
}

// EvalSha runs a script on the connected client, connecting first if
// needed, and once more after ErrClosed.
func (c *Lazy) EvalSha(ctx context.Context, sha string, keys []string, args []string) (interface{}, error) {
	c.mu.Lock()
	cn := c.conn
	c.mu.Unlock()
	if cn == nil {
		return lazyEvalSha(c, ctx, sha, keys, args)
	}
	v, err := cn.EvalSha(ctx, sha, keys, args)
	if err == ErrClosed {
		return lazyEvalSha(c, ctx, sha, keys, args)
	}
	return v, err
}

// lazyEvalSha is EvalSha connecting first, and once more after ErrClosed:
// a function apart, so that a connected call does not pay for its values
// under Yaegi.
func lazyEvalSha(c *Lazy, ctx context.Context, sha string, keys []string, args []string) (interface{}, error) {
	cn, err := c.Connect(ctx)
	if err == ErrClosed {
		cn, err = c.Connect(ctx)
	}
	if err != nil {
		return nil, err
	}
	v, err := cn.EvalSha(ctx, sha, keys, args)
	if err == ErrClosed {
		if cn, err = c.Connect(ctx); err != nil {
			return nil, err
		}
		v, err = cn.EvalSha(ctx, sha, keys, args)
	}
	return v, err
}

// ScriptLoad loads a script on the connected client, connecting first if
// needed, and once more after ErrClosed.
func (c *Lazy) ScriptLoad(ctx context.Context, script string) (string, error) {
	cn, err := c.Connect(ctx)
	if err == ErrClosed {
		cn, err = c.Connect(ctx)
	}
	if err != nil {
		return "", err
	}
	sha, err := cn.ScriptLoad(ctx, script)
	if err == ErrClosed {
		if cn, err = c.Connect(ctx); err != nil {
			return "", err
		}
		sha, err = cn.ScriptLoad(ctx, script)
	}
	return sha, err
}

// Close closes the connections, waiting for calls in progress, and
// returns the error of closing them. The client stays usable: the next
// call connects again.
func (c *Lazy) Close() error {
	c.mu.Lock()
	cn := c.conn
	c.conn = nil
	if c.onClient != nil {
		c.onClient(nil)
	}
	c.gen++
	c.mu.Unlock()
	if cn == nil {
		return nil
	}
	return cn.Close()
}
