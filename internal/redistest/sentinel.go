package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Sentinel is a master, one replica of it and two Redis Sentinels
// monitoring them, all on 127.0.0.1 with persistence off. The Sentinels
// use quorum 1, down-after-milliseconds 1000 and failover-timeout 2000,
// and are contacted without credentials.
type Sentinel struct {
	// Name is the name of the master set, as in
	// SENTINEL get-master-addr-by-name <Name>.
	Name string
	// Master is the server the Sentinels name as master: the first one
	// started, then after each Failover the promoted replica.
	Master *Server
	// Replica replicates Master: at first a server started with
	// --replicaof, after a Failover the former master, which keeps the
	// master role until the Sentinels reconfigure it (about ten seconds
	// later). Either server's Restart reuses its first command line, so a
	// restarted server takes its original role until the Sentinels
	// reconfigure it.
	Replica *Server
	// Addrs are the Sentinels' addresses, "127.0.0.1:<port>".
	Addrs []string

	procs []*process // the Sentinels, in the order of Addrs
}

// sentinelCount is the number of Sentinels StartSentinel runs: more than
// one, so that clients are tested with several addresses.
const sentinelCount = 2

// sentinelTimeout bounds StartSentinel's waits; Failover allows twice as
// much.
const sentinelTimeout = 15 * time.Second

// failoverTimeout is the Sentinels' failover-timeout.
const failoverTimeout = 2 * time.Second

// StartSentinel starts a master, a replica of it and the Sentinels, and
// returns once the replica is in sync and every Sentinel names the master
// for name, sees it up and knows the replica. name must be non-empty,
// without spaces. Everything is stopped by t.Cleanup, the Sentinels first.
// When redis-server is not on PATH the test is skipped, or fails when CI
// is "true".
func StartSentinel(t testing.TB, name string) *Sentinel {
	t.Helper()
	if name == "" || strings.ContainsAny(name, " \t\r\n") {
		t.Fatalf("redistest: sentinel master name %q: must be non-empty, without spaces", name)
	}
	// No diskless-sync delay: the first full sync would wait 5s for more
	// replicas. Both servers get it, since either may become master.
	noDelay := []string{"--repl-diskless-sync-delay", "0"}
	s := &Sentinel{Name: name, Master: Start(t, Options{Args: noDelay})}
	s.Replica = Start(t, Options{Args: append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port)}, noDelay...)})
	// A Sentinel learns of replicas from the master's INFO, which it reads
	// on connecting and then every ten seconds: start the Sentinels once
	// the master lists the replica, so they know it at once.
	deadline := time.Now().Add(sentinelTimeout)
	if err := waitSynced(s.Master, s.Replica, deadline); err != nil {
		t.Fatalf("redistest: %v", err)
	}
	bin := requireBinary(t, "redis-server")
	// One cleanup for every Sentinel, not t.Cleanup(p.stop) in the loop:
	// under Yaegi those method values did not stop every Sentinel, and
	// each interpreted run left two or three running.
	t.Cleanup(func() {
		for _, p := range s.procs {
			p.stop()
		}
	})
	for i := 0; i < sentinelCount; i++ {
		p, addr, err := startSentinel(bin, t.TempDir(), name, s.Master.Port)
		if err != nil {
			t.Fatalf("redistest: starting sentinel: %v", err)
		}
		s.procs = append(s.procs, p)
		s.Addrs = append(s.Addrs, addr)
	}
	for i, addr := range s.Addrs {
		if err := waitSentinelReady(addr, name, s.Master.Addr, deadline); err != nil {
			t.Fatalf("redistest: %v; sentinel log: %s", err, s.procs[i].logTail())
		}
	}
	return s
}

// startSentinel runs a Sentinel monitoring the master on masterPort of
// 127.0.0.1, with its config file (which Sentinel rewrites) and log in
// dir, retrying with fresh ports when the chosen one is taken. It returns
// once the Sentinel answers PING.
func startSentinel(bin, dir, name string, masterPort int) (*process, string, error) {
	conf := filepath.Join(dir, "sentinel.conf")
	log := filepath.Join(dir, "sentinel.log")
	var err error
	for attempt := 0; attempt < bindAttempts; attempt++ {
		var port int
		if port, err = freePort(); err != nil {
			continue
		}
		if err = os.WriteFile(conf, []byte(sentinelConfig(port, dir, name, masterPort)), 0o600); err != nil {
			return nil, "", err
		}
		var p *process
		if p, err = startProcess(bin, []string{"redis-server", conf, "--sentinel"}, dir, log); err != nil {
			return nil, "", err
		}
		addr := addrOf(port)
		if err = waitReady(p, addr, readyTimeout); err == nil {
			return p, addr, nil
		}
		p.stop()
	}
	return nil, "", err
}

// sentinelConfig returns the config file of a Sentinel on port.
func sentinelConfig(port int, dir, name string, masterPort int) string {
	lines := []string{
		"port " + strconv.Itoa(port),
		"bind 127.0.0.1",
		"protected-mode no",
		"daemonize no",
		`logfile ""`,
		"dir " + dir,
		"sentinel monitor " + name + " 127.0.0.1 " + strconv.Itoa(masterPort) + " 1",
		"sentinel down-after-milliseconds " + name + " 1000",
		"sentinel failover-timeout " + name + " " + strconv.Itoa(int(failoverTimeout/time.Millisecond)),
	}
	return strings.Join(lines, "\n") + "\n"
}

// waitSentinelReady polls the Sentinel at addr until it names master for
// name, sees it up (flags exactly "master") and knows at least one
// replica, or deadline passes.
func waitSentinelReady(addr, name, master string, deadline time.Time) error {
	for {
		var state string
		got, err := masterAddr(addr, name)
		if err == nil && got == master {
			var fields map[string]string
			if fields, err = sentinelMaster(addr, name); err == nil {
				state = "flags " + fields["flags"] + ", " + fields["num-slaves"] + " replicas"
				if fields["flags"] == "master" && fields["num-slaves"] != "" && fields["num-slaves"] != "0" {
					return nil
				}
			}
		} else if err == nil {
			state = "master " + got
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("sentinel %s not ready for %s at %s: %s (%v)", addr, name, master, state, err)
		}
		time.Sleep(pollInterval)
	}
}

// Failover makes the Sentinels promote the replica: it waits until the
// replica is in sync with the master (so no acknowledged write is lost),
// sends SENTINEL FAILOVER (again while a Sentinel answers that no replica
// is suitable yet), and returns once the replica reports the master role
// and every Sentinel names it. Master and Replica are then swapped. A
// second Failover waits until the Sentinels have reconfigured the former
// master as a replica, about ten seconds after the first. Measured here: a
// first Failover takes about 1.3s, a second one right after about 11s.
func (s *Sentinel) Failover(t testing.TB) {
	t.Helper()
	// The former master must first be reconfigured: up to about ten
	// seconds, then the failover itself.
	deadline := time.Now().Add(2 * sentinelTimeout)
	if err := waitSynced(s.Master, s.Replica, deadline); err != nil {
		t.Fatalf("redistest: before failover: %v", err)
	}
	for {
		reply, err := command(s.Addrs[0], "SENTINEL FAILOVER "+s.Name)
		if err == nil && reply == "OK" {
			break
		}
		// NOGOODSLAVE: the Sentinel has not yet read the replica's INFO.
		if err == nil && !strings.HasPrefix(reply, "-NOGOODSLAVE") {
			t.Fatalf("redistest: SENTINEL FAILOVER %s: %s", s.Name, reply)
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("redistest: SENTINEL FAILOVER %s: %q, %v", s.Name, reply, err)
		}
		time.Sleep(pollInterval)
	}
	sent := time.Now()
	for {
		bad := ""
		if info, err := command(s.Replica.Addr, "INFO replication"); err != nil {
			bad = fmt.Sprintf("%s: %v", s.Replica.Addr, err)
		} else if role := infoField(info, "role"); role != "master" {
			bad = fmt.Sprintf("%s has role %q", s.Replica.Addr, role)
			// A Sentinel abandons a failover that its failover-timeout
			// does not see through, as on a loaded machine, and tries
			// none for that master for twice as long: ask again while it
			// still names the former master.
			if time.Since(sent) > 3*failoverTimeout {
				if got, err := masterAddr(s.Addrs[0], s.Name); err == nil && got == s.Master.Addr {
					_, _ = command(s.Addrs[0], "SENTINEL FAILOVER "+s.Name) // OK, or -INPROG while one runs
				}
				sent = time.Now()
			}
		}
		for _, addr := range s.Addrs {
			if bad != "" {
				break
			}
			if got, err := masterAddr(addr, s.Name); err != nil {
				bad = fmt.Sprintf("sentinel %s: %v", addr, err)
			} else if got != s.Replica.Addr {
				bad = fmt.Sprintf("sentinel %s names %s", addr, got)
			}
		}
		if bad == "" {
			break
		}
		if !time.Now().Before(deadline) {
			t.Fatalf("redistest: failover of %s to %s not done: %s", s.Name, s.Replica.Addr, bad)
		}
		time.Sleep(pollInterval)
	}
	s.Master, s.Replica = s.Replica, s.Master
}

// waitSynced polls until replica reports a working link to master and has
// processed all of master's replication stream, or deadline passes.
func waitSynced(master, replica *Server, deadline time.Time) error {
	for {
		state := ""
		rinfo, err := command(replica.Addr, "INFO replication")
		var minfo string
		if err == nil {
			minfo, err = command(master.Addr, "INFO replication")
		}
		if err == nil {
			link := infoField(rinfo, "master_link_status")
			host, port := infoField(rinfo, "master_host"), infoField(rinfo, "master_port")
			have, want := infoField(rinfo, "slave_repl_offset"), infoField(minfo, "master_repl_offset")
			state = fmt.Sprintf("replica of %s:%s, link %q, offset %s of %s", host, port, link, have, want)
			h, errH := strconv.ParseInt(have, 10, 64)
			w, errW := strconv.ParseInt(want, 10, 64)
			if host+":"+port == master.Addr && link == "up" && errH == nil && errW == nil && h >= w {
				return nil
			}
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("replica %s not in sync with %s: %s (%v)", replica.Addr, master.Addr, state, err)
		}
		time.Sleep(pollInterval)
	}
}

// infoField returns the value of field in an INFO reply, or "".
func infoField(info, field string) string {
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimRight(l, "\r"), field+":"); ok {
			return v
		}
	}
	return ""
}

// masterAddr asks the Sentinel at addr for the address of name's master.
func masterAddr(addr, name string) (string, error) {
	a, err := arrayCommand(addr, "SENTINEL get-master-addr-by-name "+name)
	if err != nil {
		return "", err
	}
	if len(a) != 2 {
		return "", fmt.Errorf("SENTINEL get-master-addr-by-name %s: %d elements, want host and port", name, len(a))
	}
	return net.JoinHostPort(a[0], a[1]), nil
}

// sentinelMaster returns the fields of SENTINEL MASTER name at addr.
func sentinelMaster(addr, name string) (map[string]string, error) {
	a, err := arrayCommand(addr, "SENTINEL MASTER "+name)
	if err != nil {
		return nil, err
	}
	fields := make(map[string]string, len(a)/2)
	for i := 0; i+1 < len(a); i += 2 {
		fields[a[i]] = a[i+1]
	}
	return fields, nil
}

// arrayCommand sends an inline command to addr on a new connection and
// returns its reply, which must be an array of bulk strings; a nil array
// and an error reply are errors.
func arrayCommand(addr, cmd string) ([]string, error) {
	c, err := net.DialTimeout("tcp", addr, probeTimeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(probeTimeout))
	if _, err := c.Write([]byte(cmd + "\r\n")); err != nil {
		return nil, err
	}
	return readStrings(bufio.NewReader(c))
}

// maxArray bounds the elements readStrings accepts.
const maxArray = 1024

// readStrings reads a reply that is an array of bulk strings.
func readStrings(r *bufio.Reader) ([]string, error) {
	line, err := readLine(r)
	if err != nil {
		return nil, err
	}
	if line[0] == '-' {
		return nil, errors.New(line[1:])
	}
	if line[0] != '*' {
		return nil, fmt.Errorf("unexpected reply %q, want an array", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil || n > maxArray {
		return nil, fmt.Errorf("unexpected reply %q", line)
	}
	if n < 0 {
		return nil, errors.New("nil array")
	}
	a := make([]string, 0, n)
	for i := 0; i < n; i++ {
		line, err := readLine(r)
		if err != nil {
			return nil, err
		}
		size, err := strconv.Atoi(strings.TrimPrefix(line, "$"))
		if line[0] != '$' || err != nil || size < 0 || size > 1<<20 {
			return nil, fmt.Errorf("unexpected array element %q, want a bulk string", line)
		}
		b := make([]byte, size+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		a = append(a, string(b[:size]))
	}
	return a, nil
}

// readLine reads one non-empty line of a reply, without its CRLF.
func readLine(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return "", errors.New("empty reply line")
	}
	return line, nil
}
