package caddymodule

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Tests that a zone's identity (its counters, its ID in the admin API,
// its metrics' series) depends on the site it serves, or its id, and on
// nothing else in the config, with Caddyfiles adapted and run in this
// process.

// identityGlobal is the global options block of these tests' Caddyfiles.
const identityGlobal = "{\n\tadmin off\n\tpersist_config off\n\tlog {\n\t\tlevel WARN\n\t}\n}\n"

// site is a Caddyfile site http://127.0.0.1:<port>, bound to 127.0.0.1,
// whose sluice block has a zone called zone keyed on X-Client with the
// rate 3/m and the lines more, and which responds body.
func site(port int, zone, body string, more ...string) string {
	lines := ""
	for _, l := range more {
		lines += "\t\t" + l + "\n"
	}
	return fmt.Sprintf("http://127.0.0.1:%d {\n\tbind 127.0.0.1\n\tsluice {\n\t\tzone %s {\n\t\t\tkey {header.X-Client}\n\t\t\trate 3/m\n\t\t}\n%s\t}\n\trespond %q\n}\n",
		port, zone, lines, body)
}

// boundSiteID is the ID of the zone called name of site(port, ...)
// without an id: the site's host and port.
func boundSiteID(name string, port int) string {
	return fmt.Sprintf("%s@127.0.0.1:%d", name, port)
}

// orderedPorts returns two free ports, the first one's listener address
// sorting before the second's: the Caddyfile adapter numbers servers in
// that order, so that a site on the first, added, is srv0 and pushes a
// site on the second from srv0 to srv1.
func orderedPorts(t *testing.T) (before, after int) {
	p := freePorts(t, 2)
	if strconv.Itoa(p[0]) > strconv.Itoa(p[1]) {
		return p[1], p[0]
	}
	return p[0], p[1]
}

// awaitBody waits until url answers body (the config just loaded, not
// the previous one that may still answer for a moment after a reload),
// asking as clients of their own; it returns how many requests it sent.
func awaitBody(t *testing.T, url, body string) int {
	t.Helper()
	for i := 0; i < 100; i++ {
		if r := get(t, url, "X-Client", "await-"+strconv.Itoa(i)); r.body == body {
			return i + 1
		}
	}
	t.Fatalf("%s never answered %q", url, body)
	return 0
}

// zoneIDs returns the IDs of the zones registered, sorted.
func zoneIDs() []string {
	var ids []string
	for _, az := range registeredZones() {
		ids = append(ids, az.id)
	}
	sort.Strings(ids)
	return ids
}

// TestIdentityKeptWhenASiteIsAdded: a site's zone keeps its counters (in
// memory and in Redis, where its keys keep their names) and its ID when a
// reload adds, before it, another site with a zone of the same name,
// which counts apart; releases that named zones by their server moved
// the zone from srv0 to srv1 and restarted its counters.
func TestIdentityKeptWhenASiteIsAdded(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			var st []string
			var rs *redistest.Server
			if store == "redis" {
				rs = redistest.Start(t, redistest.Options{})
				st = []string{"store redis {", "\taddress " + rs.Addr, "\treadable_keys", "}"}
			}
			other, port := orderedPorts(t)
			url := "http://127.0.0.1:" + strconv.Itoa(port)
			loadCaddyfile(t, identityGlobal+site(port, "per_ip", "v1", st...))
			wantStatus(t, url, []int{200, 200, 200, 429}, "X-Client", "a")
			ids := zoneIDs()

			loadCaddyfile(t, identityGlobal+site(other, "per_ip", "other", st...)+site(port, "per_ip", "v2", st...))
			awaitBody(t, url, "v2")
			wantStatus(t, url, []int{429}, "X-Client", "a") // the counters kept
			wantStatus(t, "http://127.0.0.1:"+strconv.Itoa(other), []int{200}, "X-Client", "a")
			id := boundSiteID("per_ip", port)
			if len(ids) != 1 || ids[0] != id {
				t.Errorf("zone IDs %v, want %s", ids, id)
			}
			want := strings.Join(sorted(id, boundSiteID("per_ip", other)), " ")
			if got := strings.Join(zoneIDs(), " "); got != want {
				t.Errorf("after the reload: zone IDs %s, want %s", got, want)
			}
			key := "sluice:{per_ip:token_bucket:127.0.0.1:" + strconv.Itoa(port) + "/a}"
			if rs != nil && !keyExists(t, rs.Addr, key) {
				t.Errorf("no Redis key %s", key)
			}
		})
	}
}

// TestIdentityAcrossConfigs: two configs whose site is alike but that
// differ elsewhere (another site before it, with a zone of the same name,
// and global options) give the site's zone one identity, so that
// instances running them share its quota in Redis.
func TestIdentityAcrossConfigs(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	st := []string{"store redis {", "\taddress " + rs.Addr, "}"}
	other, port := orderedPorts(t)
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	loadCaddyfile(t, identityGlobal+site(port, "per_ip", "one", st...))
	wantStatus(t, url, []int{200, 200}, "X-Client", "a")
	ids := zoneIDs()
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}

	global := "{\n\tadmin off\n\tpersist_config off\n\tgrace_period 1s\n\tlog {\n\t\tlevel WARN\n\t}\n}\n"
	loadCaddyfile(t, global+site(other, "per_ip", "other", st...)+site(port, "per_ip", "two", st...))
	wantStatus(t, url, []int{200, 429}, "X-Client", "a") // 2 of 3 spent by the first config
	if got := zoneIDs(); len(got) != 2 || (got[0] != ids[0] && got[1] != ids[0]) {
		t.Errorf("zone IDs %v, want %v among them", got, ids)
	}
}

// TestIdentityExplicit: a handler's id names its zones (and keeps the
// keys that releases naming zones by their server gave them: id srv0);
// handlers with the same id share their zones of one name; the second
// handler of a site with a zone of the same name and no id counts apart,
// as "#1".
func TestIdentityExplicit(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	st := []string{"store redis {", "\taddress " + rs.Addr, "\treadable_keys", "}"}
	a, b := orderedPorts(t)
	third := freePorts(t, 1)[0]
	two := fmt.Sprintf("http://127.0.0.1:%d {\n\tbind 127.0.0.1\n\tsluice /x {\n\t\tzone per_ip {\n\t\t\tkey {header.X-Client}\n\t\t\trate 1/m\n\t\t}\n\t}\n"+
		"\tsluice /y {\n\t\tzone per_ip {\n\t\t\tkey {header.X-Client}\n\t\t\trate 1/m\n\t\t}\n\t}\n\trespond \"two\"\n}\n", third)
	loadCaddyfile(t, identityGlobal+site(a, "per_ip", "a", append([]string{"id srv0"}, st...)...)+
		site(b, "per_ip", "b", append([]string{"id srv0"}, st...)...)+two)
	want := strings.Join(sorted("per_ip@srv0", boundSiteID("per_ip", third), boundSiteID("per_ip", third)+"#1"), " ")
	if got := strings.Join(zoneIDs(), " "); got != want {
		t.Errorf("zone IDs %s, want %s", got, want)
	}
	base := func(port int) string { return "http://127.0.0.1:" + strconv.Itoa(port) }
	wantStatus(t, base(a), []int{200, 200}, "X-Client", "k")
	wantStatus(t, base(b), []int{200, 429}, "X-Client", "k") // one quota for id srv0
	if key := "sluice:{per_ip:token_bucket:srv0/k}"; !keyExists(t, rs.Addr, key) {
		t.Errorf("no Redis key %s: id srv0 must keep the keys of server srv0", key)
	}
	wantStatus(t, base(third)+"/x", []int{200, 429}, "X-Client", "k")
	wantStatus(t, base(third)+"/y", []int{200, 429}, "X-Client", "k") // the site's two handlers count apart
}

// TestIdentityHostlessSite: a site without a host alone on its server,
// whose routes (handle blocks) the Caddyfile adapter puts at the top of
// the server, keeps its zones' IDs and counters when a site with a host
// joins it on its port, and the adapter wraps its routes in one.
func TestIdentityHostlessSite(t *testing.T) {
	port := freePorts(t, 1)[0]
	url := "http://127.0.0.1:" + strconv.Itoa(port)
	zone := "\t\tsluice {\n\t\t\tzone per_ip {\n\t\t\t\tkey {header.X-Client}\n\t\t\t\trate 2/m\n\t\t\t}\n\t\t}\n"
	hostless := func(body string) string {
		return fmt.Sprintf("http://:%d {\n\tbind 127.0.0.1\n\thandle /a {\n%s\t\trespond %q\n\t}\n\thandle {\n%s\t\trespond %q\n\t}\n}\n",
			port, zone, body, zone, body)
	}
	loadCaddyfile(t, identityGlobal+hostless("v1"))
	wantStatus(t, url+"/a", []int{200, 200, 429}, "X-Client", "k")
	wantStatus(t, url, []int{200, 200, 429}, "X-Client", "k")
	id := fmt.Sprintf("per_ip@:%d", port)
	want := strings.Join(sorted(id, id+"#1"), " ")
	if got := strings.Join(zoneIDs(), " "); got != want {
		t.Errorf("zone IDs %s, want %s", got, want)
	}

	joined := fmt.Sprintf("http://localhost:%d {\n\tbind 127.0.0.1\n\trespond \"localhost\"\n}\n", port)
	loadCaddyfile(t, identityGlobal+joined+hostless("v2"))
	awaitBody(t, url, "v2")
	wantStatus(t, url+"/a", []int{429}, "X-Client", "k")
	wantStatus(t, url, []int{429}, "X-Client", "k")
	if got := strings.Join(zoneIDs(), " "); got != want {
		t.Errorf("after a site joined: zone IDs %s, want %s", got, want)
	}
}

// TestMetricsAcrossReload: the decisions' series are labelled by zone ID,
// so that two sites' zones of one name are two series, and keep counting
// across a reload that keeps the ID; a reload that drops a zone drops its
// series.
func TestMetricsAcrossReload(t *testing.T) {
	other, port := orderedPorts(t)
	url, otherURL := "http://127.0.0.1:"+strconv.Itoa(port), "http://127.0.0.1:"+strconv.Itoa(other)
	id, otherID := boundSiteID("per_ip", port), boundSiteID("per_ip", other)
	loadCaddyfile(t, identityGlobal+site(port, "per_ip", "v1"))
	wantStatus(t, url, []int{200, 200}, "X-Client", "a")
	if n := counter(t, id, "allowed"); n != 2 {
		t.Fatalf("allowed of %s: %v, want 2", id, n)
	}

	loadCaddyfile(t, identityGlobal+site(other, "per_ip", "other")+site(port, "per_ip", "v2"))
	sent := awaitBody(t, url, "v2") // each one allowed, by either config
	wantStatus(t, url, []int{200}, "X-Client", "a")
	wantStatus(t, otherURL, []int{200, 200, 200, 429}, "X-Client", "a")
	if n, want := counter(t, id, "allowed"), float64(2+sent+1); n != want {
		t.Errorf("allowed of %s after a reload: %v, want %v: counted on", id, n, want)
	}
	if n := counter(t, id, "rejected"); n != 0 {
		t.Errorf("rejected of %s: %v, want 0 (the other site's)", id, n)
	}
	if a, r := counter(t, otherID, "allowed"), counter(t, otherID, "rejected"); a != 3 || r != 1 {
		t.Errorf("%s: allowed %v, rejected %v; want 3, 1, a series of its own", otherID, a, r)
	}

	loadCaddyfile(t, identityGlobal+site(other, "per_ip", "other"))
	for _, m := range family(t, "sluice_decisions_total").GetMetric() {
		if label(m, "zone") == id {
			t.Fatalf("a series of %s, a zone the config no longer has: %v", id, m)
		}
	}
	if a := counter(t, otherID, "allowed"); a != 3 {
		t.Errorf("%s after a reload: allowed %v, want 3", otherID, a)
	}
}
