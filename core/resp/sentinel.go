package resp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"
)

// How often a [Sentinel] asks the Sentinels which server is the master:
// after a failed command at most once per minSentinelAsk, so that a master
// down costs one round of SENTINEL get-master-addr-by-name per interval,
// not one per command; and at least once per sentinelRecheck while
// commands succeed, since a former master keeps accepting writes until the
// Sentinels reconfigure it (ten seconds or more after a failover), and a
// client starting no goroutine cannot subscribe to their announcements.
const (
	minSentinelAsk  = 100 * time.Millisecond
	sentinelRecheck = time.Second
)

// SentinelOptions say how to reach the Redis Sentinels of a [Sentinel].
type SentinelOptions struct {
	// MasterName is the name of the master set the Sentinels monitor.
	MasterName string
	// Addrs are the Sentinels' "host:port" addresses, asked in order.
	Addrs []string
	// Username and Password authenticate to the Sentinels, which may have
	// credentials of their own (Options' apply to the master).
	Username, Password string
}

// Sentinel is a client of the master that Redis Sentinels name: one
// [Client] pool to it, found by asking the Sentinels
// SENTINEL get-master-addr-by-name and checked with ROLE. It is safe for
// concurrent use and starts no goroutines.
//
// After an I/O error, or an error reply that says the server is no longer
// a writable master (READONLY, MASTERDOWN), the next command asks the
// Sentinels again first (at most once per 100ms), and so does the first
// command each second; when they name another master, the pool moves
// there. A command refused with READONLY
// did not run and is sent once more to the new master; one that failed
// with an I/O error is not resent (it may have run). A Sentinel implements
// model.Scripter. Replicas are not used.
type Sentinel struct {
	opts  Options // for the master; Addr is set per master
	sopts SentinelOptions

	mu        sync.Mutex
	client    *Client            // the current master's pool
	sentinels map[string]*Client // a one-connection pool per Sentinel asked
	stale     bool               // a failure asks for the Sentinels' answer again
	asked     time.Time
	closed    bool
}

// NewSentinel returns a client of the master that the Sentinels of sopts
// name for sopts.MasterName, connected within ctx, so that a wrong name,
// address or password is reported now. opts apply to the master as they do
// in [New], except Addr, which is ignored.
func NewSentinel(ctx context.Context, sopts SentinelOptions, opts Options) (*Sentinel, error) {
	if sopts.MasterName == "" || len(sopts.Addrs) == 0 {
		return nil, errors.New("resp: sentinel: needs a master name and at least one address")
	}
	s := &Sentinel{opts: opts, sopts: sopts, sentinels: map[string]*Client{}}
	cl, err := s.dialMaster(ctx)
	if err != nil {
		return nil, err
	}
	s.client = cl
	s.asked = time.Now()
	return s, nil
}

// EvalSha implements model.Scripter on the current master.
func (s *Sentinel) EvalSha(ctx context.Context, sha string, keys []string, args []string) (interface{}, error) {
	cl, err := sentinelMaster(s, ctx)
	if err != nil {
		return nil, err
	}
	v, err := (*Client).EvalSha(cl, ctx, sha, keys, args)
	if err != nil {
		return sentinelFailed(s, ctx, cl, err, func(c *Client) (interface{}, error) {
			return (*Client).EvalSha(c, ctx, sha, keys, args)
		})
	}
	return v, nil
}

// ScriptLoad implements model.Scripter on the current master.
func (s *Sentinel) ScriptLoad(ctx context.Context, script string) (string, error) {
	cl, err := sentinelMaster(s, ctx)
	if err != nil {
		return "", err
	}
	sha, err := cl.ScriptLoad(ctx, script)
	if err != nil {
		v, err := sentinelFailed(s, ctx, cl, err, func(c *Client) (interface{}, error) { return c.ScriptLoad(ctx, script) })
		sha, _ = v.(string)
		return sha, err
	}
	return sha, nil
}

// Close closes the master's connections, as [Client.Close] does.
func (s *Sentinel) Close() error {
	s.mu.Lock()
	cl, sentinels := s.client, s.sentinels
	// One field per statement: Yaegi v0.16.1 panics on a nil in a tuple
	// assignment to fields.
	s.client = nil
	s.sentinels = map[string]*Client{}
	s.closed = true
	s.mu.Unlock()
	if cl != nil {
		cl.Close()
	}
	for _, c := range sentinels {
		c.Close()
	}
	return nil
}

// sentinelMaster returns the current master's pool, asking the Sentinels
// first when a failure made it stale.
func sentinelMaster(s *Sentinel, ctx context.Context) (*Client, error) {
	s.mu.Lock()
	cl, stale, closed, asked := s.client, s.stale, s.closed, s.asked
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if stale {
		return s.refresh(ctx, cl)
	}
	if time.Since(asked) < sentinelRecheck {
		return cl, nil
	}
	// The periodic recheck takes at most half of the time left, so that
	// Sentinels that do not answer leave the command its share.
	half := s.opts.DialTimeout
	if half <= 0 {
		half = DefaultDialTimeout
	}
	if dl, ok := ctx.Deadline(); ok {
		half = time.Until(dl) / 2
	}
	rctx, cancel := context.WithTimeout(ctx, half)
	defer cancel()
	return s.refresh(rctx, cl)
}

// sentinelFailed handles err, the failure of a command on cl: a reply
// that says cl's server is no longer a writable master makes the pool
// stale, and a READONLY refusal (the command did not run) is sent once
// more, by again, to the master the Sentinels name now. An I/O error makes
// the pool stale and is returned.
func sentinelFailed(s *Sentinel, ctx context.Context, cl *Client, err error, again func(*Client) (interface{}, error)) (interface{}, error) {
	if e, ok := err.(Error); ok {
		msg := string(e)
		if !strings.HasPrefix(msg, "READONLY") && !strings.HasPrefix(msg, "MASTERDOWN") {
			return nil, err // the command's own error
		}
		s.markStale()
		if !strings.HasPrefix(msg, "READONLY") {
			return nil, err
		}
		next, rerr := s.refresh(ctx, cl)
		if rerr != nil || next == nil || next == cl {
			return nil, err
		}
		return again(next)
	}
	if err == ErrClosed {
		// The pool moved to another master after cl was taken: the
		// command was not sent.
		s.mu.Lock()
		cur := s.client
		s.mu.Unlock()
		if cur != nil && cur != cl {
			return again(cur)
		}
		return nil, err
	}
	if ctx.Err() == nil {
		s.markStale()
	}
	return nil, err
}

func (s *Sentinel) markStale() {
	s.mu.Lock()
	s.stale = true
	s.mu.Unlock()
}

// refresh asks the Sentinels for the master, at most once per
// minSentinelAsk, and moves the pool there if it moved; it returns the
// pool to use. old is the pool the caller saw.
func (s *Sentinel) refresh(ctx context.Context, old *Client) (*Client, error) {
	s.mu.Lock()
	if s.closed || s.client == nil {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	if s.client != old || time.Since(s.asked) < minSentinelAsk {
		cl := s.client // another caller refreshed, or one did just now
		s.mu.Unlock()
		return cl, nil
	}
	s.asked = time.Now()
	s.mu.Unlock()

	addr, err := s.askMaster(ctx)
	if err != nil {
		return old, nil // keep trying the old master; the next failure asks again
	}
	if addr == old.opts.Addr {
		s.mu.Lock()
		s.stale = false
		s.mu.Unlock()
		return old, nil
	}
	next, err := s.connect(ctx, addr)
	if err != nil {
		return old, nil
	}
	s.mu.Lock()
	if s.closed || s.client != old {
		s.mu.Unlock()
		next.Close()
		return old, nil
	}
	s.client = next
	s.stale = false
	s.mu.Unlock()
	old.Close()
	return next, nil
}

// dialMaster asks the Sentinels for the master and connects to it.
func (s *Sentinel) dialMaster(ctx context.Context) (*Client, error) {
	addr, err := s.askMaster(ctx)
	if err != nil {
		return nil, err
	}
	return s.connect(ctx, addr)
}

// connect opens a pool to addr and checks, with ROLE, that it is a master.
func (s *Sentinel) connect(ctx context.Context, addr string) (*Client, error) {
	o := s.opts
	o.Addr = addr
	cl, err := New(ctx, o)
	if err != nil {
		return nil, err
	}
	v, err := cl.Do(ctx, "ROLE")
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("resp: sentinel: ROLE of %s: %w", addr, err)
	}
	if role, _ := v.([]interface{}); len(role) == 0 || role[0] != "master" {
		cl.Close()
		return nil, fmt.Errorf("resp: sentinel: %s, named master of %q, is not a master (ROLE %s)", addr, s.sopts.MasterName, describe(v))
	}
	return cl, nil
}

// askMaster returns the master's address from the first Sentinel that
// names one.
//
// Each Sentinel gets its share of the time left: ctx's, or the dial
// timeout, divided by the Sentinels not asked yet, so that one that
// accepts connections but does not answer cannot spend the others' time.
func (s *Sentinel) askMaster(ctx context.Context) (string, error) {
	var errs []string
	n := len(s.sopts.Addrs)
	for i, a := range s.sopts.Addrs {
		left := s.opts.DialTimeout
		if left <= 0 {
			left = DefaultDialTimeout
		}
		if dl, ok := ctx.Deadline(); ok {
			left = time.Until(dl)
		}
		actx, cancel := context.WithTimeout(ctx, left/time.Duration(n-i))
		addr, err := s.askOne(actx, a)
		cancel()
		if err == nil {
			return addr, nil
		}
		errs = append(errs, err.Error())
		if ctx.Err() != nil {
			break
		}
	}
	return "", fmt.Errorf("resp: sentinel: no Sentinel names the master of %q: %s", s.sopts.MasterName, strings.Join(errs, "; "))
}

// askOne asks the Sentinel at addr, on its one-connection pool, opened
// on first use.
func (s *Sentinel) askOne(ctx context.Context, addr string) (string, error) {
	s.mu.Lock()
	cl := s.sentinels[addr]
	s.mu.Unlock()
	if cl == nil {
		o := s.opts
		o.Addr, o.Username, o.Password, o.DB, o.PoolSize = addr, s.sopts.Username, s.sopts.Password, 0, 1
		o.TLS = nil
		if s.opts.TLS != nil {
			o.TLS = s.opts.TLS.Clone()
			o.TLS.ServerName = ""
		}
		var err error
		if cl, err = New(ctx, o); err != nil {
			return "", err
		}
		s.mu.Lock()
		if old := s.sentinels[addr]; old != nil || s.closed {
			s.mu.Unlock()
			cl.Close()
			if old == nil {
				return "", ErrClosed
			}
			cl = old
		} else {
			s.sentinels[addr] = cl
			s.mu.Unlock()
		}
	}
	v, err := cl.Do(ctx, "SENTINEL", "get-master-addr-by-name", s.sopts.MasterName)
	if err != nil {
		return "", fmt.Errorf("%s: %w", addr, err)
	}
	hp, _ := v.([]interface{})
	if len(hp) != 2 {
		return "", fmt.Errorf("%s: does not know %q (%s)", addr, s.sopts.MasterName, describe(v))
	}
	host, _ := hp[0].(string)
	port, _ := hp[1].(string)
	if host == "" || port == "" {
		return "", fmt.Errorf("%s: unexpected reply %s", addr, describe(v))
	}
	return net.JoinHostPort(host, port), nil
}

// describe names a reply's Go type and value, for errors.
func describe(v interface{}) string { return fmt.Sprintf("%T %v", v, v) }
