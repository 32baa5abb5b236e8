package main

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// chargeRead is what Redis held for a key of the charge zone (a fixed
// window) shortly before the window's end, when no request of the key is
// sent any more.
type chargeRead struct {
	g      *group
	key    string
	end    int64         // the window's end, Unix seconds
	at     time.Duration // when it was read
	start  string        // the state's window start, "<s> <ns>"
	count  float64
	absent bool // no state: nothing was charged in the window
}

var (
	chargeMu    sync.Mutex
	chargeReads []*chargeRead
	chargeNames = map[string]string{} // group/key: the Redis key
)

// readCharges reads, 300 ms before the end of each window of the charge
// zone, each charge key's state in Redis, until the load's end d.
func (t *topology) readCharges(d time.Duration) {
	var r *route
	for _, x := range routes {
		if x.name == "charge" {
			r = x
		}
	}
	p := r.zones[0].period
	for {
		now := time.Now()
		end := now.Truncate(p).Add(p)
		at := end.Add(-300 * time.Millisecond)
		if at.Before(now) {
			end = end.Add(p)
			at = at.Add(p)
		}
		if at.Sub(t.start) > d+time.Second {
			return
		}
		time.Sleep(time.Until(at))
		for _, g := range t.groupList {
			for k := 0; k < r.keys; k++ {
				key := g.name + "-k" + strconv.Itoa(k)
				cr := &chargeRead{g: g, key: key, end: end.Unix(), at: t.since()}
				// A read that ends after the window may see the next one's.
				if t.readCharge(cr) && time.Now().Before(end) {
					chargeMu.Lock()
					chargeReads = append(chargeReads, cr)
					chargeMu.Unlock()
				}
			}
		}
	}
}

// servers returns the addresses of g's Redis servers, not through the
// proxies.
func (t *topology) servers(g *group) []string {
	if !g.cluster {
		return []string{t.redis.addr()}
	}
	var out []string
	for _, n := range t.cluster.nodes {
		out = append(out, n.addr())
	}
	return out
}

// readCharge reads cr's state; it reports whether it could.
func (t *topology) readCharge(cr *chargeRead) bool {
	id := cr.g.name + "/" + cr.key
	chargeMu.Lock()
	name := chargeNames[id]
	chargeMu.Unlock()
	servers := t.servers(cr.g)
	if name == "" {
		for _, s := range servers {
			keys, err := redisScan(s, "*{chg:fixed_window:*"+cr.key+"}")
			if err != nil {
				return false
			}
			for _, k := range keys {
				if strings.HasSuffix(k, "/"+cr.key+"}") || strings.HasSuffix(k, ":"+cr.key+"}") {
					name = k
				}
			}
		}
		if name == "" {
			// Not written yet: a key never charged.
			return false
		}
		chargeMu.Lock()
		chargeNames[id] = name
		chargeMu.Unlock()
	}
	for _, s := range servers {
		v, err := redisDo(s, "HMGET", name, "t", "a")
		if err != nil {
			if strings.HasPrefix(err.Error(), "MOVED") {
				continue
			}
			return false
		}
		vs, ok := v.([]interface{})
		if !ok || len(vs) != 2 {
			return false
		}
		if vs[0] == nil {
			cr.absent = true
			return true
		}
		cr.start = fmt.Sprint(vs[0])
		cr.count, _ = strconv.ParseFloat(fmt.Sprint(vs[1]), 64)
		return true
	}
	return false
}

// windowStart is the Unix second a state's "<s> <ns>" instant names.
func windowStart(s string) int64 {
	f := strings.Fields(s)
	if len(f) == 0 {
		return -1
	}
	n, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return -1
	}
	return n
}
