package behaviour

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestLoadTable loads the table itself: every case is well formed.
func TestLoadTable(t *testing.T) {
	cases, err := Load(filepath.Join("..", "..", "testdata", "behaviour"))
	if err != nil {
		t.Fatal(err)
	}
	if len(cases) < 20 {
		t.Errorf("%d cases, want the table's 20 or more", len(cases))
	}
}

// TestLoadRefuses checks that a case which would mean different things in
// the two hosts, or that the format does not allow, is refused, naming
// what is wrong.
func TestLoadRefuses(t *testing.T) {
	const step = `"steps": [{"at": 0, "status": 200}]`
	tests := []struct{ name, json, want string }{
		{"token bucket without burst", `{"about": "x", "limits": [{"name": "a", "rate": "1/1s", "max_delay": "0s"}], ` + step + `}`, "writes burst and max_delay"},
		{"token bucket without max_delay", `{"about": "x", "limits": [{"name": "a", "rate": "1/1s", "burst": 1}], ` + step + `}`, "writes burst and max_delay"},
		{"rate unit", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/m"}], ` + step + `}`, "want a Go duration"},
		{"client_ip in a template", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/1m", "key": ["client_ip", "host"]}], ` + step + `}`, "client_ip only alone"},
		{"unknown field", `{"about": "x", "limit": [], ` + step + `}`, "unknown field"},
		{"time goes back", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/1m"}], "steps": [{"at": 5, "status": 200}, {"at": 4, "status": 200}]}`, "before the previous step"},
		{"status", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/1m"}], "steps": [{"at": 0, "status": 503}]}`, "want 429 or the upstream's 200"},
		{"status not the upstream's", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/1m"}], "steps": [{"at": 0, "upstream": 401, "status": 200}]}`, "want 429 or the upstream's 401"},
		{"upstream 429", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/1m"}], "steps": [{"at": 0, "upstream": 429, "status": 429}]}`, "could not be told from a refusal"},
		{"upstream out of range", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/1m"}], "steps": [{"at": 0, "upstream": 99, "status": 429}]}`, "upstream 99"},
		{"upstream header", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/1m"}], "steps": [{"at": 0, "status": 200, "header": {"x-upstream-status": "401"}}]}`, "write upstream"},
		{"count_status", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/1m", "count_status": ["401", "6xx"]}], ` + step + `}`, `count_status "6xx"`},
		{"only without reason", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/1m"}], "only": {"caddy": ""}, ` + step + `}`, "with a reason"},
		{"header value", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/1m"}], "steps": [{"at": 0, "status": 200, "header": {"X-A": ["a", 1]}}]}`, "header X-A: want a string or a list of strings"},
		{"key part", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/1m", "key": ["path"]}], ` + step + `}`, `key part "path": want client_ip`},
		{"only both", `{"about": "x", "limits": [{"name": "a", "algorithm": "fixed_window", "rate": "1/1m"}], "only": {"caddy": "a", "traefik": "b"}, ` + step + `}`, "leave it out for both"},
	}
	for _, tc := range tests {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "case.json"), []byte(tc.json), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Load(dir)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.want)
		}
	}
}

// TestCheck checks the comparison of a response with a step: the status
// of every request, the headers and body of the last only, "" for a
// header that must be absent.
func TestCheck(t *testing.T) {
	s := Step{N: 2, Status: 429, Want: map[string]string{"Retry-After": "3", "RateLimit": ""}, Body: "b"}
	h := http.Header{"Retry-After": {"4"}, "Ratelimit": {`"a";r=0;t=1`}}
	if d := s.Check(0, 429, h, "x"); len(d) != 0 {
		t.Errorf("first request: %q, want nothing but its status checked", d)
	}
	d := s.Check(1, 200, h, "x")
	want := []string{"status 200, want 429", `RateLimit: ["\"a\";r=0;t=1"], want none`, `Retry-After: ["4"], want "3"`, `body "x", want "b"`}
	if strings.Join(d, "\n") != strings.Join(want, "\n") {
		t.Errorf("last request:\n%s\nwant:\n%s", strings.Join(d, "\n"), strings.Join(want, "\n"))
	}
}

// TestRequest checks a step's request: its peer, host and query, and a
// header given as a list sent on one line each, in order.
func TestRequest(t *testing.T) {
	s := Step{Peer: "2001:db8::1", Host: "api.example", Query: "k=a&k=b",
		Header: map[string]interface{}{"X-Api-Key": []interface{}{"a", "b"}, "cookie": "s=a"}}
	r := s.Request()
	got := []string{r.RemoteAddr, r.Host, r.URL.String(), strings.Join(r.Header["X-Api-Key"], "|"), strings.Join(r.Header["Cookie"], "|")}
	want := []string{"[2001:db8::1]:1234", "api.example", "/?k=a&k=b", "a|b", "s=a"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("request %q, want %q", got, want)
	}
	if r := (Step{}).Request(); r.RemoteAddr != "192.0.2.1:1234" || r.Host != "example.com" || r.URL.String() != "/" ||
		len(r.Header) != 1 || r.Header.Get(UpstreamHeader) != "200" {
		t.Errorf("a step's default request: %s %s %s %v", r.RemoteAddr, r.Host, r.URL, r.Header)
	}
}

// TestUpstream checks the Go upstream: it answers the status a step's
// request names, 200 by default, and 500 to a request that names none.
func TestUpstream(t *testing.T) {
	for _, tc := range []struct {
		step Step
		want int
	}{{Step{}, 200}, {Step{Upstream: 401}, 401}, {Step{Upstream: 503}, 503}} {
		w := httptest.NewRecorder()
		Upstream(w, tc.step.Request())
		if w.Code != tc.want {
			t.Errorf("upstream %d: answered %d, want %d", tc.step.Upstream, w.Code, tc.want)
		}
	}
	w := httptest.NewRecorder()
	Upstream(w, httptest.NewRequest(http.MethodGet, "/", nil))
	if w.Code != http.StatusInternalServerError {
		t.Errorf("no %s: answered %d, want 500", UpstreamHeader, w.Code)
	}
}
