package inspect

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// The bounds and defaults of a HeavyHitters sketch.
const (
	DefaultSketchCounters = 128
	MinSketchCounters     = 8
	MaxSketchCounters     = 1024
	DefaultSketchWindow   = time.Minute
	MinSketchWindow       = time.Second
	MaxSketchWindow       = time.Hour
)

// Weight is one of the quantities a HeavyHitters sketch ranks keys by.
type Weight int

// The weights a sketch tracks.
const (
	WeightRejected  Weight = iota // requests rejected
	WeightAdmitted                // cost admitted
	WeightNearLimit               // admitted requests that left less than the near-limit share of the capacity
	NumWeights      = 3
)

var weightNames = [NumWeights]string{"rejected", "admitted", "near_limit"}

// String returns the weight's name: rejected, admitted or near_limit.
func (w Weight) String() string {
	if w < 0 || int(w) >= NumWeights {
		return "unknown"
	}
	return weightNames[w]
}

// ParseWeight parses a weight's name.
func ParseWeight(s string) (Weight, error) {
	for i, n := range weightNames {
		if n == s {
			return Weight(i), nil
		}
	}
	return 0, fmt.Errorf("weight %q: unknown (want rejected, admitted or near_limit)", s)
}

// HeavyHitters finds the keys with the most rejections, admitted cost and
// near misses over the last one to two windows, in constant memory: for
// each weight, a Space-Saving summary (Metwally, Agrawal and El Abbadi,
// 2005) of Counters counters for the current window and one for the
// previous, windows aligned to the Unix epoch. A summary counts every key
// it holds exactly since the key entered it; a new key, when all counters
// are taken, replaces the smallest and inherits its count as a possible
// overestimate, so a key's count is never below its true count and never
// above it by more than the smallest count (at most the window's total
// divided by Counters). Any key whose true count in a window exceeds that
// bound is held.
//
// It is safe for concurrent use; each Add and Top holds one mutex. The
// instants are the caller's (nanoseconds), so tests drive it with a fake
// clock.
type HeavyHitters struct {
	mu       sync.Mutex
	counters int
	window   int64
	start    int64 // the current window's start
	cur      [NumWeights]spaceSaving
	prev     [NumWeights]spaceSaving
}

// NewHeavyHitters returns a sketch of counters counters per weight and
// window (0: DefaultSketchCounters) over windows of the given length (0:
// DefaultSketchWindow).
func NewHeavyHitters(counters int, window time.Duration) (*HeavyHitters, error) {
	if counters == 0 {
		counters = DefaultSketchCounters
	}
	if window == 0 {
		window = DefaultSketchWindow
	}
	if counters < MinSketchCounters || counters > MaxSketchCounters {
		return nil, fmt.Errorf("counters: must be between %d and %d, got %d", MinSketchCounters, MaxSketchCounters, counters)
	}
	if window < MinSketchWindow || window > MaxSketchWindow {
		return nil, errors.New("window: must be between " + MinSketchWindow.String() + " and " + MaxSketchWindow.String() + ", got " + window.String())
	}
	h := &HeavyHitters{counters: counters, window: int64(window)}
	for i := 0; i < NumWeights; i++ {
		h.cur[i].init(counters)
		h.prev[i].init(counters)
	}
	return h, nil
}

// Counters is the number of counters per weight and window.
func (h *HeavyHitters) Counters() int { return h.counters }

// Window is the length of a window.
func (h *HeavyHitters) Window() time.Duration { return time.Duration(h.window) }

// Add counts, at instant now, rejected requests, admitted cost and near
// misses for key; zero amounts count nothing.
func (h *HeavyHitters) Add(now int64, key string, rejected, admitted, near float64) {
	h.mu.Lock()
	h.rotate(now)
	if rejected > 0 {
		h.cur[WeightRejected].add(key, rejected, h.counters)
	}
	if admitted > 0 {
		h.cur[WeightAdmitted].add(key, admitted, h.counters)
	}
	if near > 0 {
		h.cur[WeightNearLimit].add(key, near, h.counters)
	}
	h.mu.Unlock()
}

// rotate makes the window holding now the current one. h.mu is held.
func (h *HeavyHitters) rotate(now int64) {
	if now < h.start+h.window {
		return // a clock that stepped back counts in the current window
	}
	start := now - mod(now, h.window)
	for i := 0; i < NumWeights; i++ {
		if start == h.start+h.window {
			h.cur[i], h.prev[i] = h.prev[i], h.cur[i]
		} else {
			h.prev[i].reset()
		}
		h.cur[i].reset()
	}
	h.start = start
}

// HeavyHitter is one key of a sketch's ranking.
type HeavyHitter struct {
	Key string
	// Count is the weight counted for Key over the windows, at most Error
	// above the true count and never below it.
	Count float64
	// Error bounds Count's overestimate.
	Error float64
}

// TopKeys is a ranking of a sketch's keys by one weight.
type TopKeys struct {
	// Since is the start of the previous window: the counts cover the
	// time from Since to the instant of the ranking.
	Since int64
	// Keys are ranked by Count, highest first (ties by the smaller
	// Error, then by key).
	Keys []HeavyHitter
}

// Top returns the n keys with the highest counts of weight w over the
// current and the previous windows at now.
func (h *HeavyHitters) Top(now int64, w Weight, n int) TopKeys {
	h.mu.Lock()
	h.rotate(now)
	cur, prev := &h.cur[w], &h.prev[w]
	curMin, prevMin := cur.floor(h.counters), prev.floor(h.counters)
	out := make([]HeavyHitter, 0, len(cur.counters)+len(prev.counters))
	for _, c := range cur.counters {
		hh := HeavyHitter{Key: c.key, Count: c.count, Error: c.err}
		if p := prev.find(c.key); p != nil {
			hh.Count += p.count
			hh.Error += p.err
		} else {
			hh.Count += prevMin
			hh.Error += prevMin
		}
		out = append(out, hh)
	}
	for _, c := range prev.counters {
		if cur.find(c.key) == nil {
			out = append(out, HeavyHitter{Key: c.key, Count: c.count + curMin, Error: c.err + curMin})
		}
	}
	h.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		a, b := &out[i], &out[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		if a.Error != b.Error {
			return a.Error < b.Error
		}
		return a.Key < b.Key
	})
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return TopKeys{Since: h.start - h.window, Keys: out}
}

// spaceSaving is one Space-Saving summary: its counters, a min-heap of
// their indexes by count (each counter knows its place in it, so that
// moving a counter in the heap writes no map), and each key's counter.
type spaceSaving struct {
	counters []ssCounter
	heap     []int32
	index    map[string]int32
}

// ssCounter is one counter: a key, its count, the count it inherited and
// its place in the heap.
type ssCounter struct {
	key        string
	count, err float64
	pos        int32
}

func (s *spaceSaving) init(counters int) {
	s.counters = make([]ssCounter, 0, counters)
	s.heap = make([]int32, 0, counters)
	s.index = make(map[string]int32, counters)
}

// reset empties s, keeping its memory.
func (s *spaceSaving) reset() {
	for k := range s.index {
		delete(s.index, k)
	}
	s.counters = s.counters[:0]
	s.heap = s.heap[:0]
}

// floor is the most a key s does not hold may have been counted in its
// window: the smallest count once every counter is taken, else zero.
func (s *spaceSaving) floor(counters int) float64 {
	if len(s.heap) < counters {
		return 0
	}
	return s.counters[s.heap[0]].count
}

// find returns key's counter, or nil.
func (s *spaceSaving) find(key string) *ssCounter {
	if c, ok := s.index[key]; ok {
		return &s.counters[c]
	}
	return nil
}

// add counts w for key, taking the smallest counter when key is new and
// every counter is taken.
func (s *spaceSaving) add(key string, w float64, counters int) {
	if c, ok := s.index[key]; ok {
		s.counters[c].count += w
		s.down(int(s.counters[c].pos))
		return
	}
	if len(s.counters) < counters {
		c := int32(len(s.counters))
		s.counters = append(s.counters, ssCounter{key: key, count: w, pos: c})
		s.heap = append(s.heap, c)
		s.index[key] = c
		s.up(int(c))
		return
	}
	c := s.heap[0]
	least := s.counters[c].count
	delete(s.index, s.counters[c].key)
	s.counters[c] = ssCounter{key: key, count: least + w, err: least, pos: 0}
	s.index[key] = c
	s.down(0)
}

// up moves the counter at heap place i towards the root while it is
// smaller than its parent.
func (s *spaceSaving) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if s.counters[s.heap[p]].count <= s.counters[s.heap[i]].count {
			return
		}
		s.swap(i, p)
		i = p
	}
}

// down moves the counter at heap place i away from the root while it is
// larger than its smaller child.
func (s *spaceSaving) down(i int) {
	n := len(s.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if c+1 < n && s.counters[s.heap[c+1]].count < s.counters[s.heap[c]].count {
			c++
		}
		if s.counters[s.heap[i]].count <= s.counters[s.heap[c]].count {
			return
		}
		s.swap(i, c)
		i = c
	}
}

func (s *spaceSaving) swap(i, j int) {
	a, b := s.heap[i], s.heap[j]
	s.heap[i] = b
	s.heap[j] = a
	s.counters[b].pos = int32(i)
	s.counters[a].pos = int32(j)
}

// mod is the non-negative remainder of a by b (b > 0).
func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}
