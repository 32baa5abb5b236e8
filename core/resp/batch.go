package resp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// Natural batching. A command that finds every connection of the pool busy
// does not wait for one of its own: it joins the client's queue, and the
// first connection given back carries every command queued by then (up to
// maxBatch) in one write, their replies read in order. No timer and no
// goroutine are involved: a lone command never waits for company, and the
// deeper the queue, the fewer the round trips and the system calls that
// the server and the client pay per command.
//
// A queued command is run by whichever caller receives the connection: its
// own or another's. Each command keeps its own outcome: an error reply is
// that command's (NOSCRIPT, MOVED and ASK included, for its caller to
// handle), and a connection that fails fails the commands it concerns
// only. Those written whole may have run and are never sent again; those
// not written whole never ran, and are sent once more on a new connection
// when the failed one was reused, as exec does for one command.

// maxBatch bounds the commands of one batch.
const maxBatch = 128

// call is a command waiting in the client's queue, and then its outcome.
// The command is raw when not nil, and else made of a, b and d; a[0] names
// it in errors.
type call struct {
	ctx      context.Context
	deadline time.Time
	a, b, d  []string
	raw      []byte
	v        interface{}
	err      error
	queued   bool // in c.queue; guarded by c.mu
	done     chan struct{}
}

// batched runs the command made of a, b and d (or raw) for a caller that
// found no idle connection: it queues the command and waits until a
// connection is given back, then runs every queued command on it, or until
// another caller has run this one, or until ctx ends while the command is
// still queued.
func batched(c *Client, ctx context.Context, a, b, d []string, raw []byte) (interface{}, error) {
	if atomic.LoadInt32(&c.closed) != 0 {
		return nil, ErrClosed
	}
	k := &call{ctx: ctx, deadline: c.deadline(ctx), a: a, b: b, d: d, raw: raw, queued: true, done: make(chan struct{})}
	c.mu.Lock()
	c.queue = append(c.queue, k)
	c.mu.Unlock()
	for {
		select {
		case <-k.done:
			return k.v, k.err
		case cn := <-c.slots:
			batch := takeBatch(c)
			if len(batch) == 0 {
				// Another caller took this command: it is running.
				c.slots <- cn
				<-k.done
				return k.v, k.err
			}
			runBatch(c, cn, batch, true)
			select {
			case <-k.done:
				return k.v, k.err
			default:
			}
		case <-ctx.Done():
			c.mu.Lock()
			still := k.queued
			if still {
				dequeue(c, k)
			}
			c.mu.Unlock()
			if still {
				return nil, fmt.Errorf("resp: waiting for a connection: %w", ctx.Err())
			}
			<-k.done
			return k.v, k.err
		}
	}
}

// takeBatch removes the first maxBatch commands from c's queue and returns
// them.
func takeBatch(c *Client) []*call {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.queue)
	if n > maxBatch {
		n = maxBatch
	}
	batch := make([]*call, n)
	copy(batch, c.queue)
	for _, k := range batch {
		k.queued = false
	}
	rest := copy(c.queue, c.queue[n:])
	for i := rest; i < len(c.queue); i++ {
		c.queue[i] = nil
	}
	c.queue = c.queue[:rest]
	return batch
}

// dequeue removes k from c's queue; c.mu is held.
func dequeue(c *Client, k *call) {
	for i, q := range c.queue {
		if q == k {
			copy(c.queue[i:], c.queue[i+1:])
			c.queue[len(c.queue)-1] = nil
			c.queue = c.queue[:len(c.queue)-1]
			break
		}
	}
	k.queued = false
}

// finish gives k its outcome and wakes its caller.
func finish(k *call, v interface{}, err error) {
	// One field per statement: Yaegi v0.16.1 loses values assigned to
	// struct fields in a tuple.
	k.v = v
	k.err = err
	close(k.done)
}

// runBatch runs batch on cn, the pool entry its caller received (nil for a
// connection to open), and gives the entry back. Commands whose deadline
// has passed are failed unsent; the others share one deadline, the
// earliest of theirs, so that none ends later than its own. retry allows
// the commands not written whole to a reused connection that failed to be
// sent once more on a new one.
func runBatch(c *Client, cn *conn, batch []*call, retry bool) {
	now := time.Now()
	live := batch[:0]
	var deadline time.Time
	for _, k := range batch {
		if !now.Before(k.deadline) {
			finish(k, nil, fmt.Errorf("resp: %s: waiting for a connection: %w", k.a[0], context.DeadlineExceeded))
			continue
		}
		if len(live) == 0 || k.deadline.Before(deadline) {
			deadline = k.deadline
		}
		live = append(live, k)
	}
	if len(live) == 0 {
		c.slots <- cn
		return
	}
	reused := cn != nil
	if !reused {
		if atomic.LoadInt32(&c.closed) != 0 {
			c.slots <- nil
			failAll(live, ErrClosed)
			return
		}
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		var err error
		cn, err = dial(ctx, &c.opts)
		cancel()
		if err != nil {
			c.slots <- nil
			dropIdle(c)
			failAll(live, err)
			return
		}
	}
	buf := cn.wbuf[:0]
	ends := make([]int, len(live))
	for i, k := range live {
		if k.raw != nil {
			buf = append(buf, k.raw...)
		} else {
			buf = appendCommand(buf, k.a, k.b, k.d)
		}
		ends[i] = len(buf)
	}
	if cap(buf) <= maxKeptWrite {
		cn.wbuf = buf
	}
	err := cn.nc.SetDeadline(deadline)
	n := 0
	if err == nil {
		n, err = cn.nc.Write(buf)
	}
	if err != nil {
		cn.nc.Close()
		sent := 0
		for sent < len(live) && ends[sent] <= n {
			sent++
		}
		failSent(live[:sent], err)
		if sent > 0 && !errors.Is(err, os.ErrDeadlineExceeded) {
			dropIdle(c)
		}
		if reused && retry && sent < len(live) {
			runBatch(c, nil, live[sent:], false)
			return
		}
		c.slots <- nil
		failSent(live[sent:], err)
		return
	}
	for i, k := range live {
		v, err := readText(cn.br)
		if err == nil {
			finish(k, v, nil)
			continue
		}
		if _, ok := err.(Error); ok {
			finish(k, nil, err)
			continue
		}
		cn.nc.Close()
		c.slots <- nil
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			dropIdle(c)
		}
		failSent(live[i:], err)
		return
	}
	c.slots <- cn
}

// failAll fails every command of batch with err.
func failAll(batch []*call, err error) {
	for _, k := range batch {
		finish(k, nil, err)
	}
}

// failSent fails every command of batch with the I/O error err, as exec
// describes it.
func failSent(batch []*call, err error) {
	for _, k := range batch {
		finish(k, nil, ioError(k.ctx, k.a[0], err))
	}
}
