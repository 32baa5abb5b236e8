package redistest

import (
	"bytes"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 in front of a Redis server, for tests of
// what a client does when the network between it and Redis fails after a
// command was written: it counts the commands clients send, can hold the
// server's replies back, and can lose replies of commands the server ran
// by closing the connection they were due on. It speaks RESP2: it forwards
// the server's replies whole, each once complete.
type Proxy struct {
	// Addr is "127.0.0.1:<Port>", where clients connect.
	Addr string
	// Port is the port clients connect to.
	Port int

	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu       sync.Mutex
	released *sync.Cond // signalled when held turns false or the proxy closes
	held     bool
	closed   bool
	conns    map[net.Conn]bool
	sent     map[string]int // commands received from clients, by lower-case name
	cut      *cut           // the armed cut; nil when none
	cuts     int
}

// cut is an armed Proxy.Cut.
type cut struct {
	batch int // the least number of commands of a batch it cuts
	keep  int // replies of that batch forwarded before cutting
}

// StartProxy listens on a free port of 127.0.0.1 and forwards every
// connection to target, until t's cleanup closes it and its connections.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: proxy: %v", err)
	}
	p := &Proxy{
		Addr:   ln.Addr().String(),
		Port:   ln.Addr().(*net.TCPAddr).Port,
		target: target,
		ln:     ln,
		conns:  map[net.Conn]bool{},
		sent:   map[string]int{},
	}
	p.released = sync.NewCond(&p.mu)
	t.Cleanup(p.Close)
	p.wg.Add(1)
	go p.accept()
	return p
}

// Close stops listening, closes every connection and waits for the
// proxy's goroutines.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.released.Broadcast()
	p.mu.Unlock()
	p.ln.Close()
	p.wg.Wait()
}

// Sent returns how many commands named name (EVALSHA, say; any case)
// clients have sent to the proxy since it started, to be forwarded.
func (p *Proxy) Sent(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.sent[strings.ToLower(name)]
}

// WaitSent waits until clients have sent n commands named name, failing
// t after waitTimeout.
func (p *Proxy) WaitSent(t testing.TB, name string, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for p.Sent(name) < n {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: proxy: %d %s sent within %v, want %d", p.Sent(name), name, waitTimeout, n)
		}
		time.Sleep(pollInterval)
	}
}

// waitTimeout bounds Proxy.WaitSent and Proxy.WaitCut.
const waitTimeout = 10 * time.Second

// Hold stops forwarding replies: they wait in the proxy until Release.
func (p *Proxy) Hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// Release forwards the replies held since Hold, and the next as they come.
func (p *Proxy) Release() {
	p.mu.Lock()
	p.held = false
	p.released.Broadcast()
	p.mu.Unlock()
}

// Cut arms the proxy to lose replies once: on the first connection whose
// client then writes at least batch commands at once (one write, as a
// pipeline's batch), it forwards the replies of the keep first of them,
// and when the server has answered one more it closes the client's
// connection and its own to the server without forwarding it. So the
// client has written the commands and the server has run at least keep+1
// of them, but the client reads only keep replies, then the end of the
// connection. Cuts counts the cuts made.
func (p *Proxy) Cut(batch, keep int) {
	p.mu.Lock()
	p.cut = &cut{batch: batch, keep: keep}
	p.mu.Unlock()
}

// Cuts returns how many times the proxy has cut a connection (see Cut).
func (p *Proxy) Cuts() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cuts
}

// WaitCut waits until the proxy has cut n connections, failing t after
// waitTimeout.
func (p *Proxy) WaitCut(t testing.TB, n int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for p.Cuts() < n {
		if time.Now().After(deadline) {
			t.Fatalf("redistest: proxy: %d connections cut within %v, want %d", p.Cuts(), waitTimeout, n)
		}
		time.Sleep(pollInterval)
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.DialTimeout("tcp", p.target, probeTimeout)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			c.Close()
			s.Close()
			return
		}
		p.conns[c], p.conns[s] = true, true
		p.mu.Unlock()
		l := &link{p: p, client: c, server: s}
		p.wg.Add(2)
		go l.up()
		go l.down()
	}
}

// link is one client's connection and the proxy's to the server for it.
type link struct {
	p              *Proxy
	client, server net.Conn

	// Owned by up; read by down under p.mu.
	armed *cut // the cut this link's client triggered; nil when none
	// Owned by down.
	forwarded int // replies forwarded since armed
}

// close closes both connections.
func (l *link) close() {
	l.client.Close()
	l.server.Close()
	l.p.mu.Lock()
	delete(l.p.conns, l.client)
	delete(l.p.conns, l.server)
	l.p.mu.Unlock()
}

// up forwards the client's commands to the server, counting them, and
// arms the proxy's cut on this link when a write of the client holds
// enough of them.
func (l *link) up() {
	defer l.p.wg.Done()
	defer l.close()
	buf := make([]byte, 64<<10)
	var pending []byte // the start of a command not yet complete
	for {
		n, err := l.client.Read(buf)
		if n > 0 {
			pending = append(pending, buf[:n]...)
			var names []string
			for {
				end := respEnd(pending)
				if end < 0 {
					pending = nil // not RESP: not counted
				}
				if end <= 0 {
					break
				}
				names = append(names, strings.ToLower(commandName(pending[:end])))
				pending = pending[end:]
			}
			// Counted and armed before the commands reach the server, so
			// that no reply to them comes first.
			l.p.mu.Lock()
			for _, name := range names {
				l.p.sent[name]++
			}
			if c := l.p.cut; c != nil && l.armed == nil && len(names) >= c.batch {
				l.p.cut, l.armed = nil, c
			}
			l.p.mu.Unlock()
			if _, werr := l.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// down forwards the server's replies to the client, each once whole,
// unless held, and makes this link's cut.
func (l *link) down() {
	defer l.p.wg.Done()
	defer l.close()
	buf := make([]byte, 64<<10)
	var pending []byte // replies not yet forwarded
	for {
		n, err := l.server.Read(buf)
		pending = append(pending, buf[:n]...)
		var out []byte
		l.p.mu.Lock()
		for l.p.held && !l.p.closed {
			l.p.released.Wait()
		}
		armed := l.armed
		cutNow := false
		for {
			end := respEnd(pending)
			if end < 0 {
				end = len(pending) // not RESP2: forwarded as it is
			}
			if end <= 0 {
				break
			}
			if armed != nil && l.forwarded == armed.keep {
				cutNow = true
				l.p.cuts++
				break
			}
			if armed != nil {
				l.forwarded++
			}
			out = append(out, pending[:end]...)
			pending = pending[end:]
		}
		l.p.mu.Unlock()
		if len(out) > 0 {
			if _, werr := l.client.Write(out); werr != nil {
				return
			}
		}
		if cutNow || err != nil {
			return
		}
	}
}

var crlf = []byte("\r\n")

// respEnd returns the length of the RESP2 value at the start of b, or 0
// when b holds only part of one, or -1 when b does not begin with one.
func respEnd(b []byte) int {
	line := bytes.Index(b, crlf)
	if line < 0 {
		return 0
	}
	if line == 0 {
		return -1
	}
	switch b[0] {
	case '+', '-', ':':
		return line + 2
	case '$', '*':
	default:
		return -1
	}
	n, err := strconv.Atoi(string(b[1:line]))
	if err != nil {
		return -1
	}
	end := line + 2
	if n < 0 {
		return end
	}
	if b[0] == '$' {
		end += n + 2
		if len(b) < end {
			return 0
		}
		return end
	}
	for i := 0; i < n; i++ {
		e := respEnd(b[end:])
		if e <= 0 {
			return e
		}
		end += e
	}
	return end
}

// commandName returns the first element of the command cmd, an array of
// bulk strings, or "" when it has none.
func commandName(cmd []byte) string {
	line := bytes.Index(cmd, crlf)
	if line < 0 || cmd[0] != '*' || len(cmd) <= line+2 || cmd[line+2] != '$' {
		return ""
	}
	rest := cmd[line+2:]
	l := bytes.Index(rest, crlf)
	if l < 1 {
		return ""
	}
	n, err := strconv.Atoi(string(rest[1:l]))
	if err != nil || n < 0 || len(rest) < l+2+n {
		return ""
	}
	return string(rest[l+2 : l+2+n])
}
