package await

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// TestSleepConcurrent: goroutines that sleep at once, each for its own
// time, all wake having slept it (a select of the timer and ctx.Done()
// hangs here under Yaegi v0.16.1).
func TestSleepConcurrent(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan string, 16)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				d := time.Duration(g%4+1) * 100 * time.Microsecond
				t0 := time.Now()
				if !Sleep(ctx, d) {
					errs <- "Sleep reported a cancellation"
					return
				}
				if time.Since(t0) < d {
					errs <- "Sleep woke early"
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// TestSleepCancelled: a sleep ends when its context does, reporting it.
func TestSleepCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(10*time.Millisecond, cancel)
	if Sleep(ctx, time.Hour) {
		t.Error("Sleep(ctx, 1h) reported sleeping the hour, its context cancelled after 10ms")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Error("Sleep without a deadline reported a cancellation")
	}
}

// TestClosedConcurrent: goroutines that each wait for a channel of their
// own wake when theirs is closed, or when their context ends.
func TestClosedConcurrent(t *testing.T) {
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				done := make(chan struct{})
				ctx, cancel := context.WithCancel(context.Background())
				if g%2 == 0 {
					time.AfterFunc(100*time.Microsecond, func() { close(done) })
					if err := Closed(ctx, done); err != nil {
						errs <- err
					}
				} else {
					time.AfterFunc(100*time.Microsecond, cancel)
					if err := Closed(ctx, done); !errors.Is(err, context.Canceled) {
						errs <- errors.New("a cancelled wait returned " + errString(err))
					}
					close(done)
				}
				cancel()
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if err := Closed(context.Background(), closedChan()); err != nil {
		t.Errorf("Closed on a closed channel without a deadline: %v", err)
	}
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
