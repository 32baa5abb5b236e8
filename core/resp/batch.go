package resp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// Natural batching. A command that finds every entry of the pool busy
// does not wait for one of its own: it joins the client's queue, and the
// first entry given back carries every command queued by then (up to
// maxBatch) in one write, their replies read in order. No timer and no
// goroutine are involved: a lone command never waits for company, and the
// deeper the queue, the fewer the round trips and the system calls that
// the server and the client pay per command.
//
// The entry goes to the command of the batch with the latest deadline,
// whose caller runs the batch and gives the entry back in turn: the batch
// ends by that deadline, and every other command's caller returns by its
// own, or as soon as its context ends, its reply read and dropped. Each
// command keeps its own outcome: an error reply is that command's
// (NOSCRIPT, MOVED and ASK included, for its caller to handle), and a
// connection that fails fails the commands it concerns only. Those written
// whole may have run and are never sent again; those not written whole
// never ran, and are sent once more on a new connection when the failed
// one was reused, as exec does for one command.

// maxBatch bounds the commands of one batch.
const maxBatch = 128

// call is a command waiting in the client's queue, and then its outcome.
// The command is raw when not nil, and else made of a, b and d; a[0] names
// it in errors. done is closed when the outcome is known, or when lead is
// set: the caller then runs batch, of which the call is the leader, on the
// pool entry cn. fin is set, atomically, by the first outcome given to a
// call that does not lead.
type call struct {
	ctx      context.Context
	deadline time.Time
	a, b, d  []string
	raw      []byte
	v        interface{}
	err      error
	queued   bool // in c.queue; guarded by c.mu
	lead     bool // guarded by c.mu until done is closed
	fin      int32
	cn       *conn
	batch    []*call
	done     chan struct{}
}

// queue queues the command made of a, b and d (or raw), c.mu being held,
// and waits until another caller has run it, or the entry given back makes
// this caller lead the batch, or the command's deadline passes or ctx
// ends (see expire). It waits with a plain receive, the deadline and ctx's
// end arriving through callbacks: see package await for why no select.
func queue(c *Client, ctx context.Context, a, b, d []string, raw []byte) (interface{}, error) {
	// The deadline is c.deadline(ctx). Under Yaegi each function handed
	// to compiled code costs some 15 allocations, so when it is ctx's own
	// and ctx can end, ctx's end stands for the timer (runSlow's ctx ends
	// so).
	ends := ctx.Done() != nil
	deadline, timed := time.Now().Add(c.timeout), true
	if dl, ok := ctx.Deadline(); ok && !dl.After(deadline) {
		deadline, timed = dl, !ends
	}
	k := &call{ctx: ctx, deadline: deadline, a: a, b: b, d: d, raw: raw, queued: true, done: make(chan struct{})}
	c.queue = append(c.queue, k)
	c.mu.Unlock()
	wake := func() { expire(c, k) }
	var t *time.Timer
	if timed {
		t = time.AfterFunc(time.Until(deadline), wake)
	}
	var stop func() bool
	if ends {
		stop = context.AfterFunc(ctx, wake)
	}
	<-k.done
	// The callbacks end here: they would leave the batch alone (expire).
	if stop != nil {
		stop()
	}
	if t != nil {
		t.Stop()
	}
	if k.lead {
		runBatch(c, k.cn, k.batch, true)
	}
	return k.v, k.err
}

// expire ends the wait of k, whose deadline has passed or whose context
// has ended: a command still queued leaves the queue unsent, and one in a
// batch that another caller leads gets an error now, its reply to be
// dropped when read (it may have run, as a command whose read times out).
// The leader's wait ends with its batch.
func expire(c *Client, k *call) {
	c.mu.Lock()
	if k.lead {
		c.mu.Unlock()
		return
	}
	if !k.queued {
		c.mu.Unlock()
		finish(k, nil, ioError(k.ctx, k.a[0], os.ErrDeadlineExceeded))
		return
	}
	for i, q := range c.queue {
		if q == k {
			copy(c.queue[i:], c.queue[i+1:])
			c.queue[len(c.queue)-1] = nil
			c.queue = c.queue[:len(c.queue)-1]
			break
		}
	}
	k.queued = false
	c.mu.Unlock()
	err := k.ctx.Err()
	if err == nil {
		err = context.DeadlineExceeded
	}
	finish(k, nil, fmt.Errorf("resp: %s: waiting for a connection: %w", k.a[0], err))
}

// takeBatch removes the first maxBatch commands from c's queue, c.mu being
// held, and returns their leader, the one with the latest deadline, which
// is to run them on the pool entry cn (see call).
func takeBatch(c *Client, cn *conn) *call {
	n := len(c.queue)
	if n > maxBatch {
		n = maxBatch
	}
	batch := make([]*call, n)
	copy(batch, c.queue)
	k := batch[0]
	for _, q := range batch {
		q.queued = false
		if q.deadline.After(k.deadline) {
			k = q
		}
	}
	rest := copy(c.queue, c.queue[n:])
	for i := rest; i < len(c.queue); i++ {
		c.queue[i] = nil
	}
	c.queue = c.queue[:rest]
	k.lead = true
	k.cn = cn
	k.batch = batch
	return k
}

// finish gives k its outcome and wakes its caller, unless k leads its
// batch (its caller is awake, running it) or has an outcome already.
func finish(k *call, v interface{}, err error) {
	// One field per statement: Yaegi v0.16.1 loses values assigned to
	// struct fields in a tuple.
	if k.lead {
		k.v = v
		k.err = err
		return
	}
	if !atomic.CompareAndSwapInt32(&k.fin, 0, 1) {
		return
	}
	k.v = v
	k.err = err
	close(k.done)
}

// runBatch runs batch on cn, the pool entry its caller received (nil for a
// connection to open), and gives the entry back. Commands whose deadline
// has passed, or whose caller has returned, are not sent; the others
// share one deadline, the latest of theirs, so that a command's outcome is
// never cut short by another's deadline (see expire). retry allows
// the commands not written whole to a reused connection that failed to be
// sent once more on a new one.
func runBatch(c *Client, cn *conn, batch []*call, retry bool) {
	now := time.Now()
	live := batch[:0]
	var deadline time.Time
	for _, k := range batch {
		if atomic.LoadInt32(&k.fin) != 0 {
			continue
		}
		if !now.Before(k.deadline) {
			finish(k, nil, fmt.Errorf("resp: %s: waiting for a connection: %w", k.a[0], context.DeadlineExceeded))
			continue
		}
		if len(live) == 0 || deadline.Before(k.deadline) {
			deadline = k.deadline
		}
		live = append(live, k)
	}
	if len(live) == 0 {
		put(c, cn)
		return
	}
	reused := cn != nil
	if !reused {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		var err error
		cn, err = dial(ctx, &c.opts)
		cancel()
		if err != nil {
			put(c, nil)
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
		put(c, nil)
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
		put(c, nil)
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			dropIdle(c)
		}
		failSent(live[i:], err)
		return
	}
	put(c, cn)
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
