// Package await waits for a timer or a channel, or for a context to end,
// without a select statement.
//
// Yaegi v0.16.1, the interpreter Traefik runs plugins with, shares the
// channels of a select statement between the goroutines that run it at
// once: a goroutine may receive from a channel another one selected on,
// and wait forever on one nobody closes or sends to again (a select of a
// timer's channel and ctx.Done() in 16 goroutines hangs within a second).
// A plain receive is safe, so these functions wait with one: the timer,
// the channel and the context each close a channel of the call's own,
// through callbacks. Compiled, they cost a few allocations more than a
// select; they are for the slow paths that wait, not for every request.
package await

import (
	"context"
	"sync"
	"time"
)

// Sleep waits for d unless ctx ends first, and reports whether it slept
// the whole of d.
func Sleep(ctx context.Context, d time.Duration) bool {
	if ctx.Done() == nil {
		time.Sleep(d)
		return true
	}
	w := newWake()
	t := time.AfterFunc(d, w.wake)
	stop := context.AfterFunc(ctx, w.wake)
	<-w.c
	if stop() {
		// ctx has not ended: the timer woke the call.
		return true
	}
	t.Stop()
	return false
}

// Closed waits until done is closed or ctx ends, and returns nil in the
// first case, ctx.Err() in the second. It starts a goroutine that waits
// for done: the channel must be closed at last, as a dial's or a
// refresh's end is.
func Closed(ctx context.Context, done <-chan struct{}) error {
	if ctx.Done() == nil {
		<-done
		return nil
	}
	w := newWake()
	go waitClosed(done, w)
	stop := context.AfterFunc(ctx, w.wake)
	<-w.c
	if stop() {
		return nil
	}
	return ctx.Err()
}

// waitClosed wakes w once done is closed.
func waitClosed(done <-chan struct{}, w *wake) {
	<-done
	w.wake()
}

// wake is a channel closed by the first of its callers.
type wake struct {
	once sync.Once
	c    chan struct{}
}

func newWake() *wake { return &wake{c: make(chan struct{})} }

// wake closes w's channel, once.
func (w *wake) wake() { w.once.Do(w.close) }

func (w *wake) close() { close(w.c) }
