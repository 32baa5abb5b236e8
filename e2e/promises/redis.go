package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/logging"
)

// redisServer is a redis-server this program started, daemonized with a
// pid file in the run's directory (which the e2e scripts' cleanup reads),
// that the faults pause, kill and start again, empty.
type redisServer struct {
	port int
	args []string // redis-server's arguments
	dir  string

	mu  sync.Mutex
	pid int
}

func (s *redisServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// pidFile is where redis-server writes its pid.
func (s *redisServer) pidFile() string {
	return filepath.Join(s.dir, "redis-"+strconv.Itoa(s.port)+".pid")
}

// newRedis describes a redis-server on port without persistence, with
// the extra arguments; start starts it.
func newRedis(dir string, port int, extra ...string) *redisServer {
	args := []string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "yes", "--logfile", filepath.Join(dir, "redis-"+strconv.Itoa(port)+".log")}
	s := &redisServer{port: port, dir: dir}
	s.args = append(append(args, "--pidfile", s.pidFile()), extra...)
	return s
}

// start starts the server and waits until it answers PING (10 s at most).
func (s *redisServer) start() error {
	os.Remove(s.pidFile())
	if out, err := exec.Command("redis-server", s.args...).CombinedOutput(); err != nil {
		return fmt.Errorf("redis-server on %d: %v: %s", s.port, err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(s.pidFile()); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 && ping(s.addr()) {
				s.mu.Lock()
				s.pid = pid
				s.mu.Unlock()
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("redis-server on %d did not answer PING within 10 s", s.port)
}

// signal sends sig to the server.
func (s *redisServer) signal(sig syscall.Signal) {
	s.mu.Lock()
	pid := s.pid
	s.mu.Unlock()
	if pid > 0 {
		syscall.Kill(pid, sig)
	}
}

// kill kills the server and waits for its port to close.
func (s *redisServer) kill() {
	s.signal(syscall.SIGCONT)
	s.signal(syscall.SIGKILL)
	for i := 0; i < 200 && dialable(s.addr()); i++ {
		time.Sleep(10 * time.Millisecond)
	}
}

// stop ends the server for good.
func (s *redisServer) stop() { s.kill() }

// ping reports whether a Redis at addr answers PING within 200 ms.
func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 7)
	n, _ := c.Read(buf)
	return string(buf[:n]) == "+PONG\r\n"
}

// dialable reports whether something accepts connections at addr.
func dialable(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// cluster is a Redis Cluster of three masters, each announcing the
// address of its proxy, so that every client reaches every node through
// it.
type cluster struct {
	nodes   []*redisServer
	proxies []*proxy
}

// startCluster starts three cluster nodes behind proxies and joins them.
func startCluster(dir string) (*cluster, error) {
	c := &cluster{}
	for i := 0; i < 3; i++ {
		port, err := freeClusterPort()
		if err != nil {
			return nil, err
		}
		p, err := newProxy("node"+strconv.Itoa(i), "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			return nil, err
		}
		_, pport, _ := net.SplitHostPort(p.addr)
		nd := filepath.Join(dir, "node-"+strconv.Itoa(port))
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return nil, err
		}
		s := newRedis(nd, port, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(nd, "nodes.conf"),
			"--cluster-announce-ip", "127.0.0.1", "--cluster-announce-port", pport,
			"--cluster-announce-bus-port", strconv.Itoa(port+10000))
		if err := s.start(); err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, s)
		c.proxies = append(c.proxies, p)
	}
	args := []string{"--cluster", "create"}
	for _, s := range c.nodes {
		args = append(args, s.addr())
	}
	args = append(args, "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("redis-cli --cluster create: %v: %s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok := true
		for _, s := range c.nodes {
			info, err := redisDo(s.addr(), "CLUSTER", "INFO")
			if err != nil || !strings.Contains(fmt.Sprint(info), "cluster_state:ok") {
				ok = false
			}
		}
		if ok {
			return c, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the cluster is not ok within 30 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// freeClusterPort finds a free loopback port whose bus port (10000
// above) is free too.
func freeClusterPort() (int, error) {
	for i := 0; i < 100; i++ {
		p, err := freePort()
		if err != nil {
			return 0, err
		}
		if p+10000 < 65000 && !dialable("127.0.0.1:"+strconv.Itoa(p+10000)) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free cluster port")
}

// freePort returns a loopback port nothing listens on.
func freePort() (int, error) {
	for i := 0; i < 100; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if p >= 10000 && p < 55000 {
			return p, nil
		}
	}
	return 0, fmt.Errorf("no free port")
}

func init() {
	// The faults make go-redis log every dial it fails; the checks
	// report what matters.
	redis.SetLogger(&logging.VoidLogger{})
}

// redisDo runs one command against the server at addr on a connection
// of its own, without following redirections.
func redisDo(addr string, args ...interface{}) (interface{}, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return c.Do(ctx, args...).Result()
}

// redisScan returns the keys matching pattern on the server at addr.
func redisScan(addr, pattern string) ([]string, error) {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, PoolSize: 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var keys []string
	iter := c.Scan(ctx, 0, pattern, 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	return keys, iter.Err()
}

// redisSize is the number of fields, members or elements of the key k.
func redisSize(addr, k string) (int64, error) {
	typ, err := redisDo(addr, "TYPE", k)
	if err != nil {
		return 0, fmt.Errorf("TYPE %s: %v", k, err)
	}
	cmd := map[string]string{"hash": "HLEN", "zset": "ZCARD", "set": "SCARD", "list": "LLEN"}[fmt.Sprint(typ)]
	if cmd == "" {
		return 0, nil
	}
	n, err := redisDo(addr, cmd, k)
	if err != nil {
		return 0, fmt.Errorf("%s %s: %v", cmd, k, err)
	}
	size, _ := n.(int64)
	return size, nil
}
