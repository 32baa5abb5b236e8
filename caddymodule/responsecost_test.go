package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	_ "github.com/caddyserver/caddy/v2/modules/caddyhttp/headers" // the upstream's response headers
)

// TestResponseCost loads a Caddyfile into this process's Caddy, on a
// fake clock, with a zone per source of response_cost, each of 10 or 100
// a minute and an estimate of 0 (the hostile one's: 1), and an upstream
// that answers the body, X-Cost and {http.vars.cost} the request asks
// for: {http.response.size} charges the body's bytes,
// {http.response.header.X-Cost} the header and {http.vars.cost} a later
// handler's variable, each into debt that refuses the next request with
// the Retry-After of the debt; a hostile value (not a number, NaN,
// negative, infinite) leaves the estimate, and so does the header under
// which sluice hands the value to core when the upstream sends it.
func TestResponseCost(t *testing.T) {
	var now int64
	testClock = func() int64 { return now }
	t.Cleanup(func() { testClock = nil })
	zone := func(name, rate, expr string, more ...string) string {
		return "\t\tzone " + name + " {\n\t\t\tmatch path /" + name + "\n\t\t\trate " + rate +
			"\n\t\t\tresponse_cost " + expr + "\n" + strings.Join(more, "") + "\t\t}\n"
	}
	loadCaddyfile(t, "{\n\tadmin off\n\tpersist_config off\n\tlog {\n\t\tlevel ERROR\n\t}\n}\n"+
		"http://:"+strconv.Itoa(freePorts(t, 1)[0])+" {\n\tsluice {\n"+
		zone("bytes", "100/m", "{http.response.size}")+
		zone("header", "10/m", "{http.response.header.X-Cost}")+
		zone("vars", "10/m", "{http.vars.cost}")+
		zone("hostile", "10/m", "{http.response.header.X-Cost}", "\t\t\tcost 1\n")+
		"\t}\n\troute {\n"+
		"\t\theader X-Cost {http.request.header.Up-Cost}\n"+
		"\t\theader "+responseCostHeader(3)+" 0\n"+
		"\t\tvars cost {http.request.header.Up-Cost}\n"+
		"\t\trespond {http.request.header.Up-Body} 200\n\t}\n}\n")
	srv := httpServer(t)
	send := func(path, body, cost string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodGet, "http://localhost"+path, nil)
		r.Header.Set("Up-Body", body)
		r.Header.Set("Up-Cost", cost)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	admit := func(path, body, cost string) {
		t.Helper()
		if w := send(path, body, cost); w.Code != 200 || w.Body.String() != body {
			t.Fatalf("%s, body %q, cost %q: %d %q, want 200 and the body", path, body, cost, w.Code, w.Body)
		}
	}
	refuse := func(path, retryAfter string) {
		t.Helper()
		w := send(path, "", "")
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") != retryAfter {
			t.Fatalf("%s: %d, Retry-After %q; want 429, Retry-After %s", path, w.Code, w.Header().Get("Retry-After"), retryAfter)
		}
	}

	// 70 and 50 bytes of 100 a minute: 20 in debt, repaid in 12 s.
	admit("/bytes", strings.Repeat("b", 70), "")
	admit("/bytes", strings.Repeat("b", 50), "")
	refuse("/bytes", "12")

	// 4 and 8 of 10 a minute: 2 in debt, 12 s.
	admit("/header", "", "4")
	admit("/header", "", "8")
	refuse("/header", "12")
	admit("/vars", "", "6")
	admit("/vars", "", "6")
	refuse("/vars", "12")

	// Each hostile answer is charged its estimate, 1: the eleventh
	// request of the minute is refused, for the 6 s that repay one.
	for _, v := range []string{"x", "NaN", "-5", "1e999", "Inf", "", "0x10", " ", "1,2", "-0.5"} {
		admit("/hostile", "", v)
	}
	refuse("/hostile", "6")
}
