package redistest

import (
	"bufio"
	"strings"
	"testing"
)

func TestSentinel(t *testing.T) {
	s := StartSentinel(t, "sluicetest")
	if len(s.Addrs) != sentinelCount {
		t.Fatalf("%d sentinels, want %d", len(s.Addrs), sentinelCount)
	}
	first := s.Master
	if got, err := command(first.Addr, "SET k v"); err != nil || got != "OK" {
		t.Fatalf("SET on the master: %q, %v", got, err)
	}
	if got, err := command(s.Replica.Addr, "SET k w"); err != nil || !strings.HasPrefix(got, "-READONLY") {
		t.Fatalf("SET on the replica: %q, %v; want READONLY", got, err)
	}
	for _, addr := range s.Addrs {
		if got, err := masterAddr(addr, s.Name); err != nil || got != first.Addr {
			t.Errorf("sentinel %s names %q, %v; want %s", addr, got, err, first.Addr)
		}
	}

	s.Failover(t)
	if s.Master == first || s.Replica != first {
		t.Fatal("Failover did not swap Master and Replica")
	}
	for _, addr := range s.Addrs {
		if got, err := masterAddr(addr, s.Name); err != nil || got != s.Master.Addr {
			t.Errorf("after failover, sentinel %s names %q, %v; want %s", addr, got, err, s.Master.Addr)
		}
	}
	// The write made before the failover survived it, and the new master
	// accepts writes.
	if got, err := command(s.Master.Addr, "GET k"); err != nil || got != "v" {
		t.Errorf("GET k on the new master: %q, %v", got, err)
	}
	if got, err := command(s.Master.Addr, "SET k2 v2"); err != nil || got != "OK" {
		t.Errorf("SET on the new master: %q, %v", got, err)
	}

	if testing.Short() {
		return
	}
	// The Sentinels reconfigure the former master as a replica (about ten
	// seconds later); a second failover promotes it back.
	s.Failover(t)
	if s.Master != first {
		t.Fatal("second Failover did not promote the first master back")
	}
	if got, err := command(first.Addr, "GET k2"); err != nil || got != "v2" {
		t.Errorf("GET k2 on the first master after two failovers: %q, %v", got, err)
	}
}

func TestReadStrings(t *testing.T) {
	tests := []struct {
		reply string
		want  []string // nil: an error is expected
	}{
		{"*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6379\r\n", []string{"127.0.0.1", "6379"}},
		{"*0\r\n", []string{}},
		{"*1\r\n$0\r\n\r\n", []string{""}},
		{"*-1\r\n", nil},
		{"-ERR No such master with that name\r\n", nil},
		{"+OK\r\n", nil},
		{"*1\r\n:1\r\n", nil},
		{"*2\r\n$1\r\na\r\n", nil},
		{"*1\r\n$5\r\nab\r\n", nil},
		{"*99999\r\n", nil},
		{"\r\n", nil},
	}
	for _, tt := range tests {
		got, err := readStrings(bufio.NewReader(strings.NewReader(tt.reply)))
		if tt.want == nil {
			if err == nil {
				t.Errorf("readStrings(%q) = %q, want an error", tt.reply, got)
			}
			continue
		}
		if err != nil || strings.Join(got, ",") != strings.Join(tt.want, ",") || len(got) != len(tt.want) {
			t.Errorf("readStrings(%q) = %q, %v; want %q", tt.reply, got, err, tt.want)
		}
	}
}

func TestInfoField(t *testing.T) {
	info := "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\nmaster_link_status:up\r\n"
	tests := []struct{ field, want string }{
		{"role", "slave"},
		{"master_link_status", "up"},
		{"master_port", ""},
		{"master", ""},
	}
	for _, tt := range tests {
		if got := infoField(info, tt.field); got != tt.want {
			t.Errorf("infoField(%q) = %q, want %q", tt.field, got, tt.want)
		}
	}
}
