// Package redistest runs real redis-server processes for tests: a standalone
// server (optionally with a password, an ACL user and a TLS port), a Redis
// Cluster of several masters, or a master with a replica watched by Sentinels,
// all bound to 127.0.0.1 with persistence off.
//
// It uses the standard library only and starts processes with os.StartProcess
// (not os/exec), so tests that use it also run under Traefik's Yaegi
// interpreter without -unrestricted.
//
// When redis-server (or redis-cli, for clusters) is not on PATH, the test is
// skipped, or fails when the environment variable CI is "true".
package redistest

import (
	"crypto/x509"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Options configure a standalone [Server].
type Options struct {
	// Password, when set, is required by the default user (requirepass).
	Password string
	// ACLUser and ACLPassword, when both set, create an ACL user allowed
	// every key, channel and command.
	ACLUser, ACLPassword string
	// TLS also serves TLS on a second port (see [Server.TLSAddr]) with a
	// certificate for 127.0.0.1 signed by a CA generated for this server;
	// clients are not asked for certificates.
	TLS bool
	// Args are extra redis-server arguments, appended last
	// (e.g. "--maxmemory", "1mb").
	Args []string
}

// Server is a redis-server child process listening on a free 127.0.0.1
// port, with its own temporary directory and no persistence. Its exported
// fields are set by [Start] and never change.
type Server struct {
	// Addr is "127.0.0.1:<Port>", the plain-TCP address.
	Addr string
	// Port is the plain-TCP port.
	Port int

	bin     string
	dir     string
	opts    Options
	tlsPort int // 0 without TLS
	busPort int // cluster bus port; 0 outside a cluster
	certs   certFiles
	caPool  *x509.CertPool

	mu   sync.Mutex
	proc *process // nil while stopped
}

// Start runs a redis-server configured by opts and returns once it answers
// PING (within readyTimeout). The server is stopped by t.Cleanup.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	return start(t, opts, false)
}

// start runs a server; cluster adds cluster mode with its own bus port.
func start(t testing.TB, opts Options, cluster bool) *Server {
	t.Helper()
	s := &Server{bin: requireBinary(t, "redis-server"), dir: t.TempDir(), opts: opts}
	if opts.TLS {
		certs, pool, err := writeCerts(s.dir)
		if err != nil {
			t.Fatalf("redistest: generating TLS certificates: %v", err)
		}
		s.certs, s.caPool = certs, pool
	}
	t.Cleanup(s.Stop)
	// A port found free may be taken before redis-server binds it: retry
	// with fresh ports a few times.
	var err error
	for attempt := 0; attempt < bindAttempts; attempt++ {
		if err = s.pickPorts(opts.TLS, cluster); err != nil {
			continue
		}
		if err = s.launch(); err == nil {
			return s
		}
	}
	t.Fatalf("redistest: starting redis-server: %v", err)
	return nil
}

// bindAttempts bounds the retries of Start when a chosen port is taken.
const bindAttempts = 5

// pickPorts chooses the free ports the next launch will use.
func (s *Server) pickPorts(tls, cluster bool) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	s.Port = port
	s.Addr = addrOf(port)
	if tls {
		if s.tlsPort, err = freePort(); err != nil {
			return err
		}
	}
	if cluster {
		if s.busPort, err = freePort(); err != nil {
			return err
		}
	}
	return nil
}

// args returns redis-server's command line.
func (s *Server) args() []string {
	a := []string{
		"redis-server",
		"--port", strconv.Itoa(s.Port),
		"--bind", "127.0.0.1",
		"--protected-mode", "no",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--logfile", "",
		"--daemonize", "no",
	}
	if s.opts.Password != "" {
		a = append(a, "--requirepass", s.opts.Password)
	}
	if s.opts.ACLUser != "" && s.opts.ACLPassword != "" {
		a = append(a, "--user", s.opts.ACLUser, "on", ">"+s.opts.ACLPassword, "~*", "&*", "+@all")
	}
	if s.tlsPort != 0 {
		a = append(a,
			"--tls-port", strconv.Itoa(s.tlsPort),
			"--tls-cert-file", s.certs.cert,
			"--tls-key-file", s.certs.key,
			"--tls-ca-cert-file", s.certs.ca,
			"--tls-auth-clients", "no")
	}
	if s.busPort != 0 {
		a = append(a,
			"--cluster-enabled", "yes",
			"--cluster-port", strconv.Itoa(s.busPort),
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
	}
	return append(a, s.opts.Args...)
}

// launch starts the process on the chosen ports and waits until it answers
// PING; on failure the process is gone.
func (s *Server) launch() error {
	log := filepath.Join(s.dir, "redis.log")
	p, err := startProcess(s.bin, s.args(), s.dir, log)
	if err != nil {
		return err
	}
	if err := waitReady(p, s.Addr, readyTimeout); err != nil {
		p.stop()
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	return nil
}

// readyTimeout bounds the wait for a started server to answer PING.
const readyTimeout = 10 * time.Second

// Stop stops the server: SIGINT (redis-server shuts down as on SIGTERM),
// then SIGKILL if it has not exited within stopTimeout, and waits for the
// process. It is idempotent and safe to call concurrently.
func (s *Server) Stop() {
	s.mu.Lock()
	p := s.proc
	s.proc = nil
	s.mu.Unlock()
	if p != nil {
		p.stop()
	}
}

// Restart stops the server if it runs and starts it again on the same
// ports and directory, returning once it answers PING. A cluster node
// keeps its identity and slots (its nodes.conf survives).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.launch(); err != nil {
		t.Fatalf("redistest: restarting redis-server on %s: %v", s.Addr, err)
	}
}

// TLSAddr returns "127.0.0.1:<port>" of the TLS listener, or "" when the
// server was started without Options.TLS.
func (s *Server) TLSAddr() string {
	if s.tlsPort == 0 {
		return ""
	}
	return addrOf(s.tlsPort)
}

// CAPool returns a pool holding the CA that signed the server's TLS
// certificate, or nil without Options.TLS.
func (s *Server) CAPool() *x509.CertPool { return s.caPool }

// CertFiles returns the PEM files of the CA certificate, the server
// certificate (for 127.0.0.1 and localhost) and its private key; all ""
// without Options.TLS.
func (s *Server) CertFiles() (ca, cert, key string) {
	return s.certs.ca, s.certs.cert, s.certs.key
}

// LogFile returns the path of the server's log, useful in failure messages.
func (s *Server) LogFile() string { return filepath.Join(s.dir, "redis.log") }

// requireBinary returns the path of name on PATH, or skips t (fails it
// when CI is "true") with instructions to install Debian's redis-server.
func requireBinary(t testing.TB, name string) string {
	t.Helper()
	if p := lookPath(name); p != "" {
		return p
	}
	msg := name + " not found: install Debian's redis-server (apt-get install redis-server)"
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s", msg)
	}
	t.Skip(msg)
	return ""
}

// ScriptCalls returns how many scripts (EVAL and EVALSHA) the server has
// run since it started, per INFO commandstats.
func (s *Server) ScriptCalls(t testing.TB) int {
	t.Helper()
	return s.scriptStat(t, "calls")
}

// scriptStat returns the sum of a field of the scripts' commands (EVAL
// and EVALSHA) in the server's INFO commandstats; 0 for a command not run
// yet.
func (s *Server) scriptStat(t testing.TB, field string) int {
	t.Helper()
	info, err := command(s.Addr, "INFO commandstats")
	if err != nil {
		t.Fatalf("redistest: INFO commandstats on %s: %v", s.Addr, err)
	}
	n := 0
	for _, cmd := range []string{"cmdstat_eval", "cmdstat_evalsha"} {
		for _, f := range strings.Split(infoField(info, cmd), ",") {
			if v, ok := strings.CutPrefix(f, field+"="); ok {
				c, err := strconv.Atoi(v)
				if err != nil {
					t.Fatalf("redistest: INFO commandstats on %s: %s:%s", s.Addr, cmd, f)
				}
				n += c
			}
		}
	}
	return n
}
