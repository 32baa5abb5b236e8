package main

import (
	"net"
	"sync"
	"time"
)

// stallMin is the least oversleep of a 5 ms sleep that counts as a stall
// of the machine: a time in which a process that asked to run did not.
const stallMin = 30 * time.Millisecond

// stallWatch records the machine's stalls, as this process sees them:
// the timing bounds that allow for scheduling jitter (shaping's slack,
// the recovery bound) are lengthened by the stalls measured around what
// they judge, and a decision that timed out during one is not counted
// against a host.
type stallWatch struct {
	mu     sync.Mutex
	stalls [][2]time.Duration // start, length
}

// run measures until stop is closed.
func (w *stallWatch) run(t *topology, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		t0 := time.Now()
		time.Sleep(5 * time.Millisecond)
		if d := time.Since(t0) - 5*time.Millisecond; d >= stallMin {
			w.mu.Lock()
			w.stalls = append(w.stalls, [2]time.Duration{t0.Sub(t.start), d})
			w.mu.Unlock()
		}
	}
}

// longest returns the longest part of a stall within [a, b].
func (w *stallWatch) longest(a, b time.Duration) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	most := time.Duration(0)
	for _, s := range w.stalls {
		if d := overlap(s[0], s[0]+s[1], a, b); d > most {
			most = d
		}
	}
	return most
}

// overlap is the length of [a, b] ∩ [c, d], or zero; a stall that
// touches an instant (a single-instant interval) counts as a nanosecond.
func overlap(a, b, c, d time.Duration) time.Duration {
	if c > a {
		a = c
	}
	if d < b {
		b = d
	}
	switch {
	case b < a:
		return 0
	case b == a:
		return 1
	}
	return b - a
}

// summary returns how many stalls were measured and the longest.
func (w *stallWatch) summary() (int, time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	most := time.Duration(0)
	for _, s := range w.stalls {
		if s[1] > most {
			most = s[1]
		}
	}
	return len(w.stalls), most
}

// redisWatch measures a Redis server's own answers, PING every 10 ms on
// a connection of its own (not through a proxy): a decision that timed out
// while Redis took 30 ms or more to answer PING is the failure policy
// doing its documented job, not a host's fault.
type redisWatch struct {
	stallWatch
	addr    string
	cluster bool // a Cluster node's, or the standalone server's
}

// run measures until stop is closed.
func (w *redisWatch) run(t *topology, stop <-chan struct{}) {
	var c net.Conn
	buf := make([]byte, 64)
	for {
		select {
		case <-stop:
			if c != nil {
				c.Close()
			}
			return
		default:
		}
		time.Sleep(10 * time.Millisecond)
		if c == nil {
			var err error
			if c, err = net.DialTimeout("tcp", w.addr, 100*time.Millisecond); err != nil {
				c = nil
				continue
			}
		}
		t0 := time.Now()
		c.SetDeadline(t0.Add(2 * time.Second))
		if _, err := c.Write([]byte("PING\r\n")); err != nil {
			c.Close()
			c = nil
			continue
		}
		if n, err := c.Read(buf); err != nil || string(buf[:n]) != "+PONG\r\n" {
			c.Close()
			c = nil
			continue
		}
		if d := time.Since(t0); d >= stallMin {
			w.mu.Lock()
			w.stalls = append(w.stalls, [2]time.Duration{t0.Sub(t.start), d})
			w.mu.Unlock()
		}
	}
}

// stalled returns the longest stall, of this process or of a Redis
// server h reaches, that overlaps [a, b].
func (t *topology) stalled(h *host, a, b time.Duration) time.Duration {
	most := t.stalls.longest(a, b)
	for _, w := range t.redisWatches {
		if w.cluster == h.group.cluster {
			if d := w.longest(a, b); d > most {
				most = d
			}
		}
	}
	return most
}
