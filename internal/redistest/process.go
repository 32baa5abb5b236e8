package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// process is a started child and a channel closed when it has exited.
type process struct {
	p      *os.Process
	exited chan struct{}
	log    string
}

// startProcess runs bin with argv (argv[0] included) in dir, sending its
// stdout and stderr to the file log.
func startProcess(bin string, argv []string, dir, log string) (*process, error) {
	f, err := os.OpenFile(log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer f.Close() // the child holds its own descriptors
	p, err := os.StartProcess(bin, argv, &os.ProcAttr{Dir: dir, Files: []*os.File{nil, f, f}})
	if err != nil {
		return nil, err
	}
	pr := &process{p: p, exited: make(chan struct{}), log: log}
	go func() {
		p.Wait()
		close(pr.exited)
	}()
	return pr, nil
}

// stopTimeout bounds each of the two waits of process.stop.
const stopTimeout = 5 * time.Second

// stop interrupts the process, kills it if it is still running after
// stopTimeout, and waits (bounded) for it to exit.
func (pr *process) stop() {
	pr.p.Signal(os.Interrupt)
	select {
	case <-pr.exited:
		return
	case <-time.After(stopTimeout):
	}
	pr.p.Kill()
	select {
	case <-pr.exited:
	case <-time.After(stopTimeout):
	}
}

// wait waits up to d for the process to exit and reports whether it did.
func (pr *process) wait(d time.Duration) bool {
	select {
	case <-pr.exited:
		return true
	case <-time.After(d):
		return false
	}
}

// logTail returns the end of the process's log, for error messages.
func (pr *process) logTail() string {
	b, err := os.ReadFile(pr.log)
	if err != nil {
		return err.Error()
	}
	const n = 2000
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}

// pollInterval is the pause between two readiness probes.
const pollInterval = 20 * time.Millisecond

// waitReady polls addr with PING until the server answers (any reply,
// NOAUTH included, means it is serving), the process exits, or timeout
// elapses.
func waitReady(pr *process, addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if _, err := command(addr, "PING"); err == nil {
			return nil
		} else if !time.Now().Before(deadline) {
			return fmt.Errorf("%s did not answer PING within %v: %v; log: %s", addr, timeout, err, pr.logTail())
		}
		if pr.wait(pollInterval) {
			return fmt.Errorf("redis-server exited before answering on %s; log: %s", addr, pr.logTail())
		}
	}
}

// probeTimeout bounds one command sent by the harness itself.
const probeTimeout = 500 * time.Millisecond

// command sends an inline command to addr on a new connection and returns
// the first reply: a simple string, an error reply (as "-ERR ..."), an
// integer (":n") or a bulk string's contents.
func command(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(probeTimeout))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply")
	}
	switch line[0] {
	case '+':
		return line[1:], nil
	case '-', ':':
		return line, nil
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 || n > 1<<20 {
			return "", fmt.Errorf("unexpected reply %q", line)
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return "", err
		}
		return string(b[:n]), nil
	}
	return "", fmt.Errorf("unexpected reply %q", line)
}

// freePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func freePort() (int, error) { return FreePort() }

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago,
// for a server a test starts. It takes the ports between 10000 and the
// start of the kernel's ephemeral range where that range leaves room, as
// scripts/ports.sh does: the ports "127.0.0.1:0" hands out are the ones
// outgoing connections take too, so on a busy machine one may be taken
// again before the server binds it. A process walks that range from a
// random start and never returns a port twice, so that servers of one
// test process (and what they keep by their address) stay apart.
func FreePort() (int, error) {
	ports.mu.Lock()
	defer ports.mu.Unlock()
	lo, hi := 10000, ephemeralStart()-1
	if hi-lo >= 1000 {
		if ports.next == 0 {
			ports.next = lo + rand.Intn(hi-lo+1)
		}
		for i := 0; i < 200; i++ {
			p := ports.next
			if ports.next++; ports.next > hi {
				ports.next = lo
			}
			if l, err := net.Listen("tcp", addrOf(p)); err == nil {
				l.Close()
				return p, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return port, nil
}

// ports is where FreePort goes on in this process.
var ports struct {
	mu   sync.Mutex
	next int // the next port to try; 0 before the first call
}

// ephemeralStart returns the first port of the kernel's ephemeral range,
// or 32768, Linux's default, if it cannot be read.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 32768
	}
	return n
}

// addrOf returns "127.0.0.1:port".
func addrOf(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// lookPath returns the path of an executable file called name in a
// directory of PATH, or "" (os/exec is unavailable to sandboxed Yaegi).
func lookPath(name string) string {
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}
