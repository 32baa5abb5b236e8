package resp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/core/await"
)

// Limits of a [Cluster].
const (
	// maxRedirects is the most MOVED or ASK redirections (and re-routings
	// after a node's pool was closed by a refresh) one command follows.
	maxRedirects = 2
	// minStaleRefresh is the least time between two refreshes of the slot
	// map caused by I/O errors, so that a node down costs one CLUSTER
	// SLOTS per interval, not one per command.
	minStaleRefresh = 100 * time.Millisecond
	// clusterSlots is the number of hash slots of a Redis Cluster.
	clusterSlots = 16384
)

// Cluster is a client of a Redis Cluster: one [Client] pool per master,
// each command sent to the master that serves its first key's hash slot.
// It is safe for concurrent use and starts no goroutines.
//
// The slot map comes from CLUSTER SLOTS, asked of a known master or else
// of a seed. A MOVED reply refreshes it and the command is sent again to
// the node named in the reply; an ASK reply (a slot being migrated) sends
// ASKING and the command on one connection to the node named. A command
// follows at most two redirections. After an I/O error the command is not
// resent (it may have run), but the next command refreshes the map first,
// at most once per 100ms, so that a failover is noticed. A refresh runs
// outside the lock, one at a time: while it dials masters or waits for a
// node that does not answer, other commands go on with the current map.
//
// A Cluster implements model.Scripter. Replicas are not used.
type Cluster struct {
	opts  Options // as given; Addr is set per node
	seeds []string

	mu        sync.Mutex
	nodes     map[string]*Client // masters of the current map, by address
	masters   []*Client          // the same, in CLUSTER SLOTS order
	owner     []*Client          // clusterSlots entries; nil for a slot not served
	stale     bool               // an I/O error asks for a refresh
	refreshed time.Time          // end of the last refresh
	closed    bool
	// refreshing is closed when the refresh under way ends; nil when none
	// is.
	refreshing chan struct{}
}

// NewCluster returns a client of the Redis Cluster that seeds (host:port
// addresses of any of its nodes) belong to. It reads the slot map from the
// first seed that answers and connects to every master, within ctx, so that
// a wrong address, password or TLS setting is reported now. opts apply to
// every node as they do in [New], except Addr, which is ignored, and DB,
// which must be 0 (a cluster has only database 0). An empty TLS ServerName
// is set, per node, to the node's host.
func NewCluster(ctx context.Context, seeds []string, opts Options) (*Cluster, error) {
	if len(seeds) == 0 {
		return nil, errors.New("resp: cluster: no seed address")
	}
	if opts.DB != 0 {
		return nil, fmt.Errorf("resp: cluster: DB %d: a Redis Cluster has only DB 0", opts.DB)
	}
	for _, s := range seeds {
		o := opts
		o.Addr = s
		if err := o.normalize(); err != nil {
			return nil, err
		}
	}
	c := &Cluster{opts: opts, seeds: append([]string(nil), seeds...), nodes: map[string]*Client{}}
	if err := c.refresh(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// EvalSha runs EVALSHA sha with keys and args on the master serving the
// hash slot of keys[0] (any master when keys is empty) and returns the
// script's decoded reply. All keys must share that slot, or Redis replies
// CROSSSLOT. Errors are as for [Client.EvalSha], a redirection followed to
// its end being no error.
func (c *Cluster) EvalSha(ctx context.Context, sha string, keys []string, args []string) (interface{}, error) {
	slot := -1
	if len(keys) > 0 {
		slot = KeySlot(keys[0])
	}
	cl, err := c.route(ctx, slot)
	if err != nil {
		return nil, err
	}
	v, err := cl.EvalSha(ctx, sha, keys, args)
	for i := 0; i < maxRedirects && err != nil; i++ {
		if err == ErrClosed {
			// A refresh closed the pool of a node no longer master.
			if cl, err = c.route(ctx, slot); err != nil {
				return nil, err
			}
			v, err = cl.EvalSha(ctx, sha, keys, args)
			continue
		}
		re, ok := err.(Error)
		if !ok {
			c.markStale()
			return nil, err
		}
		msg := string(re)
		ask := strings.HasPrefix(msg, "ASK ")
		if !ask && !strings.HasPrefix(msg, "MOVED ") {
			return nil, err
		}
		addr, perr := redirectAddr(msg)
		if perr != nil {
			return nil, perr
		}
		var temp bool
		if cl, temp, err = c.node(ctx, addr, !ask); err != nil {
			return nil, err
		}
		if ask {
			v, err = cl.execAsking(ctx, sha, keys, args)
		} else {
			v, err = cl.EvalSha(ctx, sha, keys, args)
		}
		if temp {
			cl.Close()
		}
	}
	return v, err
}

// ScriptLoad loads script on every master (SCRIPT LOAD) and returns its
// SHA-1 in hexadecimal. It stops at the first failure, returning its error.
func (c *Cluster) ScriptLoad(ctx context.Context, script string) (string, error) {
	if _, err := c.route(ctx, -1); err != nil {
		return "", err
	}
	c.mu.Lock()
	masters := append([]*Client(nil), c.masters...)
	c.mu.Unlock()
	sha := ""
	for _, m := range masters {
		s, err := m.ScriptLoad(ctx, script)
		if err != nil {
			if err != ErrClosed {
				c.markStale()
			}
			return "", err
		}
		sha = s
	}
	return sha, nil
}

// Close closes every node's connections, waiting for calls in progress.
// Calls that start after Close fail with ErrClosed. Close is idempotent
// and always returns nil.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	masters := c.masters
	c.masters = nil
	c.nodes = map[string]*Client{}
	c.owner = nil
	c.mu.Unlock()
	closeClients(masters)
	return nil
}

// route returns the pool of the master serving slot (the first master
// when slot is negative), refreshing the slot map first when an I/O error
// asked for it and no refresh is under way.
func (c *Cluster) route(ctx context.Context, slot int) (*Client, error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	due := c.stale && c.refreshing == nil && time.Since(c.refreshed) >= minStaleRefresh
	c.mu.Unlock()
	var err error
	if due {
		err = c.refresh(ctx)
	}
	c.mu.Lock()
	var cl *Client
	if slot < 0 {
		if len(c.masters) > 0 {
			cl = c.masters[0]
		}
	} else if c.owner != nil {
		cl = c.owner[slot]
	}
	c.mu.Unlock()
	if cl == nil {
		if err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("resp: cluster: hash slot %d is not served", slot)
	}
	return cl, nil
}

// node returns the pool of addr; moved, after a MOVED reply, first
// refreshes the slot map unless a refresh is under way: during a
// resharding, when every command may be moved, one refresh runs at a time
// and the others follow their replies' addresses. When addr is not a
// master of the map, node opens a pool for one command and reports it
// temp: the caller closes it after use.
func (c *Cluster) node(ctx context.Context, addr string, moved bool) (cl *Client, temp bool, err error) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, false, ErrClosed
	}
	due := moved && c.refreshing == nil
	c.mu.Unlock()
	if due {
		err = c.refresh(ctx)
	}
	c.mu.Lock()
	cl = c.nodes[addr]
	c.mu.Unlock()
	if cl != nil {
		return cl, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	// A node the map does not list as master (a map already stale
	// again): a pool for this command only.
	if cl, err = c.dialNode(ctx, addr); err != nil {
		return nil, false, err
	}
	return cl, true, nil
}

// markStale asks the next command to refresh the slot map.
func (c *Cluster) markStale() {
	c.mu.Lock()
	c.stale = true
	c.mu.Unlock()
}

// dialNode opens a pool to addr with the cluster's options.
func (c *Cluster) dialNode(ctx context.Context, addr string) (*Client, error) {
	o := c.opts
	o.Addr = addr
	return New(ctx, o)
}

// refresh reads the slot map with CLUSTER SLOTS from a known master,
// else from a seed, connects to every master not yet known and installs
// the new map, closing the pools of nodes no longer masters. It holds
// c.mu only to read and to install the map, never during I/O. A caller
// that finds a refresh under way waits for it to end (or for ctx) and
// reports its outcome as nil. On failure the map is unchanged.
func (c *Cluster) refresh(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	if done := c.refreshing; done != nil {
		c.mu.Unlock()
		return await.Closed(ctx, done)
	}
	done := make(chan struct{})
	c.refreshing = done
	masters := append([]*Client(nil), c.masters...)
	known := make(map[string]*Client, len(c.nodes))
	for addr, cl := range c.nodes {
		known[addr] = cl
	}
	c.mu.Unlock()

	from, v, err := c.askSlots(ctx, masters)
	var m *slotMap
	if err == nil {
		m, err = c.buildMap(ctx, from, v, known)
	}

	c.mu.Lock()
	c.refreshing = nil
	close(done)
	c.refreshed = time.Now()
	var drop []*Client
	switch {
	case m == nil:
	case err != nil || c.closed:
		drop = m.opened
		if err == nil {
			err = ErrClosed
		}
	default:
		for addr, cl := range c.nodes {
			if m.nodes[addr] == nil {
				drop = append(drop, cl)
			}
		}
		c.nodes, c.masters, c.owner = m.nodes, m.masters, m.owner
		c.stale = false
	}
	c.mu.Unlock()
	closeClients(drop)
	return err
}

// askSlots asks CLUSTER SLOTS of the masters, then of the seeds not among
// them, and returns the first reply and whom it came from.
func (c *Cluster) askSlots(ctx context.Context, masters []*Client) (string, interface{}, error) {
	var lastErr error
	tried := map[string]bool{}
	for _, m := range masters {
		if tried[m.opts.Addr] {
			continue
		}
		tried[m.opts.Addr] = true
		v, err := m.Do(ctx, "CLUSTER", "SLOTS")
		if err == nil {
			return m.opts.Addr, v, nil
		}
		lastErr = err
	}
	for _, s := range c.seeds {
		if tried[s] {
			continue
		}
		tried[s] = true
		cl, err := c.dialNode(ctx, s)
		if err != nil {
			lastErr = err
			continue
		}
		v, err := cl.Do(ctx, "CLUSTER", "SLOTS")
		cl.Close()
		if err == nil {
			return s, v, nil
		}
		lastErr = err
	}
	return "", nil, fmt.Errorf("resp: cluster: no node answered CLUSTER SLOTS: %w", lastErr)
}

// slotMap is a slot map read by refresh, not yet installed: the masters,
// the owner of every slot, and the pools refresh opened for it.
type slotMap struct {
	nodes   map[string]*Client
	masters []*Client
	owner   []*Client
	opened  []*Client
}

// buildMap makes the CLUSTER SLOTS reply v, from the node at from, a slot
// map, reusing the pools of known masters and connecting to new ones. On
// failure the map it returns holds only the pools it opened, to close.
func (c *Cluster) buildMap(ctx context.Context, from string, v interface{}, known map[string]*Client) (*slotMap, error) {
	fromHost, _, _ := net.SplitHostPort(from)
	m := &slotMap{nodes: map[string]*Client{}, owner: make([]*Client, clusterSlots)}
	ranges, ok := v.([]interface{})
	if !ok || len(ranges) == 0 {
		return m, fmt.Errorf("resp: cluster: CLUSTER SLOTS from %s: no slot ranges", from)
	}
	for _, r := range ranges {
		lo, hi, addr, err := parseSlotRange(r, fromHost)
		if err == nil {
			cl := m.nodes[addr]
			if cl == nil {
				cl = known[addr]
				if cl == nil {
					if cl, err = c.dialNode(ctx, addr); err == nil {
						m.opened = append(m.opened, cl)
					}
				}
				if err == nil {
					m.nodes[addr] = cl
					m.masters = append(m.masters, cl)
				}
			}
			for s := lo; err == nil && s <= hi; s++ {
				m.owner[s] = cl
			}
		}
		if err != nil {
			return m, fmt.Errorf("resp: cluster: CLUSTER SLOTS from %s: %w", from, err)
		}
	}
	return m, nil
}

// parseSlotRange reads one entry of a CLUSTER SLOTS reply: first slot,
// last slot, then the master as [host, port, ...]. An empty host (Redis 7
// when the node does not know its own address) stands for defaultHost.
func parseSlotRange(r interface{}, defaultHost string) (lo, hi int, addr string, err error) {
	f, _ := r.([]interface{})
	if len(f) < 3 {
		return 0, 0, "", errors.New("malformed slot range")
	}
	from, ok1 := f[0].(int64)
	to, ok2 := f[1].(int64)
	m, _ := f[2].([]interface{})
	if !ok1 || !ok2 || from < 0 || to < from || to >= clusterSlots || len(m) < 2 {
		return 0, 0, "", errors.New("malformed slot range")
	}
	host, _ := m[0].(string)
	port, ok := m[1].(int64)
	if !ok {
		return 0, 0, "", errors.New("malformed master address")
	}
	if host == "" || host == "?" {
		host = defaultHost
	}
	return int(from), int(to), net.JoinHostPort(host, strconv.FormatInt(port, 10)), nil
}

// redirectAddr returns the address of a MOVED or ASK reply,
// "MOVED <slot> <host>:<port>". An empty host means the replying node's,
// which this client cannot tell apart: it is reported as an error.
func redirectAddr(msg string) (string, error) {
	f := strings.Fields(msg)
	if len(f) != 3 {
		return "", fmt.Errorf("resp: cluster: malformed redirection %q", msg)
	}
	host, _, err := net.SplitHostPort(f[2])
	if err != nil || host == "" {
		return "", fmt.Errorf("resp: cluster: malformed redirection %q", msg)
	}
	return f[2], nil
}

// closeClients closes each of cls.
func closeClients(cls []*Client) {
	for _, cl := range cls {
		cl.Close()
	}
}

// execAsking runs ASKING then EVALSHA sha with keys and args on one
// connection, as an ASK redirection requires: a connection of its own,
// beside the pool, as ASK redirections happen only while a slot migrates.
func (c *Client) execAsking(ctx context.Context, sha string, keys, args []string) (interface{}, error) {
	head := []string{"EVALSHA", sha, strconv.Itoa(len(keys))}
	cn, err := dial(ctx, &c.opts)
	if err != nil {
		return nil, err
	}
	defer cn.nc.Close()
	deadline := c.deadline(ctx)
	var v interface{}
	_, _, err = roundTrip(cn, deadline, []string{"ASKING"}, nil, nil, nil)
	if err == nil {
		v, _, err = roundTrip(cn, deadline, head, keys, args, nil)
	}
	if err == nil {
		return v, nil
	}
	if _, ok := err.(Error); ok {
		return nil, err
	}
	return nil, ioError(ctx, "EVALSHA", err)
}

// KeySlot is the Redis Cluster hash slot of key: CRC16 (XMODEM) of its
// hash tag (the text between the first "{" and the next "}", when not
// empty) or of the whole key, modulo 16384.
func KeySlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc = crc<<8 ^ crc16Table[byte(crc>>8)^key[i]]
	}
	return int(crc) & (clusterSlots - 1)
}

// crc16Table drives KeySlot's CRC16: polynomial 0x1021, initial value 0.
var crc16Table = makeCRC16Table()

func makeCRC16Table() *[256]uint16 {
	var t [256]uint16
	for i := 0; i < 256; i++ {
		crc := uint16(i) << 8
		for b := 0; b < 8; b++ {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
		t[i] = crc
	}
	return &t
}
