package redistest

import (
	"bufio"
	"crypto/tls"
	"strings"
	"testing"
	"time"
)

func TestServer(t *testing.T) {
	s := Start(t, Options{Password: "pw", ACLUser: "u", ACLPassword: "upw"})
	if got, err := command(s.Addr, "PING"); err != nil || !strings.HasPrefix(got, "-NOAUTH") {
		t.Fatalf("PING without AUTH: %q, %v", got, err)
	}
	for _, auth := range []string{"AUTH pw", "AUTH u upw"} {
		if got, err := command(s.Addr, auth); err != nil || got != "OK" {
			t.Errorf("%s: %q, %v", auth, got, err)
		}
	}
	if got, err := command(s.Addr, "AUTH wrong"); err != nil || !strings.HasPrefix(got, "-WRONGPASS") {
		t.Errorf("AUTH wrong: %q, %v", got, err)
	}
	if s.TLSAddr() != "" || s.CAPool() != nil {
		t.Error("TLS set up without Options.TLS")
	}

	s.Stop()
	s.Stop() // idempotent
	if _, err := command(s.Addr, "PING"); err == nil {
		t.Fatal("PING answered after Stop")
	}
	s.Restart(t)
	if got, err := command(s.Addr, "PING"); err != nil || !strings.HasPrefix(got, "-NOAUTH") {
		t.Fatalf("PING after Restart: %q, %v", got, err)
	}
}

func TestServerArgs(t *testing.T) {
	s := Start(t, Options{Args: []string{"--maxmemory", "12345678"}})
	got, err := command(s.Addr, "INFO memory")
	if err != nil || !strings.Contains(got, "\r\nmaxmemory:12345678\r\n") {
		t.Fatalf("INFO memory lacks maxmemory:12345678: %v\n%s", err, got)
	}
}

func TestServerTLS(t *testing.T) {
	s := Start(t, Options{TLS: true})
	ca, cert, key := s.CertFiles()
	if ca == "" || cert == "" || key == "" || s.TLSAddr() == "" {
		t.Fatalf("TLS files %q %q %q, address %q", ca, cert, key, s.TLSAddr())
	}
	c, err := tls.Dial("tcp", s.TLSAddr(), &tls.Config{RootCAs: s.CAPool(), ServerName: "127.0.0.1"})
	if err != nil {
		t.Fatalf("TLS dial: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(probeTimeout))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "+PONG\r\n" {
		t.Fatalf("PING over TLS: %q, %v", line, err)
	}
	if got, err := command(s.Addr, "PING"); err != nil || got != "PONG" {
		t.Fatalf("plain PING: %q, %v", got, err)
	}
}

func TestCluster(t *testing.T) {
	c := StartCluster(t, 3)
	if len(c.Addrs) != 3 || len(c.Nodes) != 3 {
		t.Fatalf("%d addresses, %d nodes", len(c.Addrs), len(c.Nodes))
	}
	// A key's slot lives on exactly one master; the others redirect.
	moved := 0
	for _, addr := range c.Addrs {
		got, err := command(addr, "SET k v")
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(got, "-MOVED ") {
			moved++
		} else if got != "OK" {
			t.Errorf("SET on %s: %q", addr, got)
		}
	}
	if moved != 2 {
		t.Errorf("%d MOVED replies, want 2", moved)
	}
	// A restarted node rejoins with its slots.
	c.Nodes[1].Restart(t)
	if err := c.waitOK(clusterTimeout); err != nil {
		t.Fatal(err)
	}
}

func TestMissingLine(t *testing.T) {
	info := "cluster_state:ok\r\ncluster_slots_ok:16384\r\ncluster_known_nodes:3\r\n"
	tests := []struct {
		want []string
		miss string
	}{
		{[]string{"cluster_state:ok", "cluster_known_nodes:3"}, ""},
		{[]string{"cluster_state:ok", "cluster_known_nodes:4"}, "cluster_known_nodes:4"},
		{[]string{"cluster_state:fail"}, "cluster_state:fail"},
	}
	for _, tt := range tests {
		if got := missingLine(info, tt.want); got != tt.miss {
			t.Errorf("missingLine(%v) = %q, want %q", tt.want, got, tt.miss)
		}
	}
}
