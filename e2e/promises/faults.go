package main

import (
	"fmt"
	"math/rand"
	"strings"
	"sync"
	"syscall"
	"time"
)

// fault is one scheduled break of the way between hosts and Redis, or of
// Redis itself.
type fault struct {
	n      int
	at     time.Duration // planned start, since the run's start
	dur    time.Duration // planned length
	kind   string        // latency, drop_reply, reset, blackhole, pause, kill, restart
	target string        // host:<name>, group:<name>, cluster, redis, node:<i>, d4
	param  float64       // latency in ms, drop probability
	seed   int64

	mu         sync.Mutex
	start, end time.Duration // as applied; end: Redis answers again (kill, restart) or the toxic is gone
	done       bool
	note       string
}

func (f *fault) String() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	p := ""
	switch f.kind {
	case "latency":
		p = fmt.Sprintf(" %.0fms", f.param)
	case "drop_reply":
		p = fmt.Sprintf(" p=%.2f", f.param)
	}
	s := fmt.Sprintf("#%d %s%s on %s planned %.2fs+%.2fs", f.n, f.kind, p, f.target, f.at.Seconds(), f.dur.Seconds())
	if f.done {
		s += fmt.Sprintf(", applied %.3fs..%.3fs", f.start.Seconds(), f.end.Seconds())
	}
	if f.note != "" {
		s += " (" + f.note + ")"
	}
	return s
}

// window is when f was in effect: from its start to its end (for a fault
// not yet applied, as planned).
func (f *fault) window() (time.Duration, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done {
		return f.start, f.end
	}
	return f.at, f.at + f.dur
}

// empties reports whether f leaves Redis empty: its state lost.
func (f *fault) empties() bool { return f.kind == "kill" || f.kind == "restart" }

// schedule draws the faults of a run of length d from rnd: one after
// another, 1.5 to 4.5 s apart, from 6 s to 6 s before the end, of every
// kind, on every target; a drop of replies on the Cluster at 20 s (the
// defect-1 check needs one) and a restart of Redis for the solo scenario.
func schedule(rnd *rand.Rand, d time.Duration, t *topology) []*fault {
	var out []*fault
	kinds := []struct {
		kind   string
		weight int
	}{{"latency", 3}, {"drop_reply", 3}, {"reset", 2}, {"blackhole", 2}, {"pause", 2}, {"kill", 1}, {"restart", 1}}
	total := 0
	for _, k := range kinds {
		total += k.weight
	}
	uni := func(lo, hi float64) time.Duration {
		return time.Duration((lo + rnd.Float64()*(hi-lo)) * float64(time.Second))
	}
	var hostNames, groupNames []string
	for _, h := range t.hosts {
		if h.proxy != nil {
			hostNames = append(hostNames, h.name)
		}
	}
	for _, g := range t.groupList {
		if !g.cluster {
			groupNames = append(groupNames, g.name)
		}
	}
	forced, restart := false, d <= soloAt+10*time.Second
	at := 6 * time.Second
	for {
		at += uni(1.5, 4.5)
		f := &fault{seed: rnd.Int63()}
		switch {
		case !restart && at+5*time.Second > soloAt:
			// The solo scenario's restart of Redis, on time, nothing
			// else from a second before it.
			restart = true
			at = soloAt + soloRestart
			f.kind, f.target = "restart", "redis"
		case !forced && at >= 20*time.Second && t.cluster != nil:
			forced = true
			f.kind, f.target, f.param, f.dur = "drop_reply", "cluster", 0.3, 4*time.Second
		default:
			w := rnd.Intn(total)
			for _, k := range kinds {
				if w < k.weight {
					f.kind = k.kind
					break
				}
				w -= k.weight
			}
			switch f.kind {
			case "latency", "drop_reply", "reset", "blackhole":
				// A host's way, a group's, or the Cluster's.
				switch x := rnd.Intn(10); {
				case x < 5:
					f.target = "host:" + hostNames[rnd.Intn(len(hostNames))]
				case x < 7:
					f.target = "group:" + groupNames[rnd.Intn(len(groupNames))]
				case t.cluster != nil:
					f.target = "cluster"
				default:
					f.target = "group:ga"
				}
			default:
				f.target = "redis"
				if t.cluster != nil && t.long && rnd.Intn(3) == 0 {
					f.target = fmt.Sprintf("node:%d", rnd.Intn(len(t.cluster.nodes)))
				}
			}
			switch f.kind {
			case "latency":
				f.param = float64(20 + rnd.Intn(300))
				f.dur = uni(1, 3)
			case "drop_reply":
				f.param = 0.05 + 0.25*rnd.Float64()
				f.dur = uni(2, 4)
			case "reset", "blackhole", "pause":
				f.dur = uni(0.5, 2.5)
			case "kill":
				f.dur = uni(0.5, 2)
			case "restart":
				f.dur = 0
			}
		}
		if at+f.dur > d-6*time.Second {
			break
		}
		f.at = at
		f.n = len(out) + 1
		out = append(out, f)
		at += f.dur
	}
	return out
}

// proxies returns the proxies a fault's target names.
func (t *topology) targetProxies(target string) []*proxy {
	var ps []*proxy
	switch {
	case target == "cluster":
		ps = append(ps, t.cluster.proxies...)
	case target == "d4":
		ps = append(ps, t.byName["c1"].d4proxy)
	case strings.HasPrefix(target, "host:"):
		ps = append(ps, t.byName[strings.TrimPrefix(target, "host:")].proxy)
	case strings.HasPrefix(target, "group:"):
		for _, h := range t.groups[strings.TrimPrefix(target, "group:")].hosts {
			ps = append(ps, h.proxy)
		}
	}
	return ps
}

// targetServer returns the redis-server a fault's target names.
func (t *topology) targetServer(target string) *redisServer {
	if target == "redis" {
		return t.redis
	}
	var i int
	fmt.Sscanf(target, "node:%d", &i)
	return t.cluster.nodes[i]
}

// affects returns the hosts whose way to Redis f breaks.
func (t *topology) affects(f *fault) []*host {
	var hs []*host
	switch {
	case f.target == "redis":
		for _, g := range t.groupList {
			if !g.cluster {
				hs = append(hs, g.hosts...)
			}
		}
	case f.target == "cluster" || strings.HasPrefix(f.target, "node:"):
		hs = append(hs, t.groups["gk"].hosts...)
	case strings.HasPrefix(f.target, "host:"):
		hs = append(hs, t.byName[strings.TrimPrefix(f.target, "host:")])
	case strings.HasPrefix(f.target, "group:"):
		hs = append(hs, t.groups[strings.TrimPrefix(f.target, "group:")].hosts...)
	}
	return hs
}

// apply runs f at its time: it sleeps until then, breaks, sleeps its
// length, repairs and records when it was in effect.
func (t *topology) apply(f *fault) {
	time.Sleep(time.Until(t.start.Add(f.at)))
	begin := t.since()
	name := fmt.Sprintf("f%d", f.n)
	note := ""
	switch f.kind {
	case "latency", "drop_reply", "reset", "blackhole":
		typ, stream, attrs := "", "downstream", ""
		switch f.kind {
		case "latency":
			typ, attrs = "latency", fmt.Sprintf(`{"latency":%d,"jitter":%d}`, int(f.param), int(f.param)/4)
		case "drop_reply":
			typ, attrs = "drop_reply", fmt.Sprintf(`{"probability":%g,"seed":%d}`, f.param, f.seed)
		case "reset":
			typ, stream, attrs = "reset_peer", "upstream", `{"timeout":0}`
		case "blackhole":
			typ, stream, attrs = "timeout", "upstream", `{"timeout":0}`
		}
		ps := t.targetProxies(f.target)
		for _, p := range ps {
			if err := p.add(name, typ, stream, attrs); err != nil {
				note = err.Error()
			}
		}
		begin = t.since()
		time.Sleep(time.Until(t.start.Add(f.at + f.dur)))
		for _, p := range ps {
			p.remove(name)
		}
	case "pause":
		s := t.targetServer(f.target)
		s.signal(syscall.SIGSTOP)
		begin = t.since()
		time.Sleep(time.Until(t.start.Add(f.at + f.dur)))
		s.signal(syscall.SIGCONT)
	case "kill", "restart":
		s := t.targetServer(f.target)
		s.kill()
		// Redis lost its state when it was killed: a set of admissions
		// from both sides of the restart holds this instant.
		t.emptied(f, t.since())
		time.Sleep(time.Until(t.start.Add(f.at + f.dur)))
		if err := s.start(); err != nil {
			note = err.Error()
		} else if f.target != "redis" {
			// A Cluster node answers CLUSTERDOWN until it has heard
			// from the others again: Redis answers once its state is ok.
			for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
				if info, err := redisDo(s.addr(), "CLUSTER", "INFO"); err == nil && strings.Contains(fmt.Sprint(info), "cluster_state:ok") {
					break
				}
			}
		}
	}
	end := t.since()
	f.mu.Lock()
	f.start, f.end, f.done, f.note = begin, end, true, note
	f.mu.Unlock()
}
