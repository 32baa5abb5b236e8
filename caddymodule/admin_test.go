package caddymodule

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/demand"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/internal/resptest"
)

// adminAPI is Caddy's admin endpoint of a test config.
type adminAPI struct {
	t    *testing.T
	base string
}

// call sends method to the admin endpoint's path and decodes the JSON
// answer into out (when not nil); it returns the status.
func (a adminAPI) call(method, path string, out any) int {
	a.t.Helper()
	req, err := http.NewRequest(method, a.base+path, nil)
	if err != nil {
		a.t.Fatal(err)
	}
	res, err := client.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		a.t.Fatal(err)
	}
	if out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			a.t.Fatalf("%s %s: status %d, body %q: %v", method, path, res.StatusCode, body, err)
		}
	}
	return res.StatusCode
}

// mustCall is call that requires status 200.
func (a adminAPI) mustCall(method, path string, out any) {
	a.t.Helper()
	var raw json.RawMessage
	if status := a.call(method, path, &raw); status != http.StatusOK {
		a.t.Fatalf("%s %s: status %d, body %s", method, path, status, raw)
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			a.t.Fatal(err)
		}
	}
}

// String shows the answer's values rather than their pointers.
func (k keyAnswer) String() string {
	b, _ := json.Marshal(k)
	return string(b)
}

// loadWithAdmin loads servers with the admin endpoint on a free port.
func loadWithAdmin(t *testing.T, servers ...server) ([]string, adminAPI) {
	t.Helper()
	p := freePorts(t, 1)
	urls := loadCaddyAdmin(t, p[0], servers...)
	return urls, adminAPI{t: t, base: "http://127.0.0.1:" + strconv.Itoa(p[0])}
}

// testAdminReset: a client at 429, reset through the admin API, is
// admitted on its next request; the API shows its state before and
// after. It returns the port of the server.
func testAdminReset(t *testing.T, store map[string]any, wantStore string) int {
	p := freePorts(t, 1)
	h := map[string]any{"zones": []any{zone("per_ip", "3/m")}}
	if store != nil {
		h["store"] = store
	}
	urls, api := loadWithAdmin(t, server{port: p[0], handler: h})
	wantStatus(t, urls[0], []int{200, 200, 200, 429})

	var zones zonesAnswer
	api.mustCall("GET", "/sluice/zones", &zones)
	if len(zones.Zones) != 1 {
		t.Fatalf("zones: %+v, want one", zones)
	}
	z := zones.Zones[0]
	if z.ID != siteID("per_ip", p[0]) || z.Name != "per_ip" || z.Server != "srv0" || z.Algorithm != "token_bucket" ||
		z.Quota != 3 || z.Period != 60 || z.Burst != 3 || z.NearLimit != 0.1 || !strings.HasPrefix(z.Store, wantStore) ||
		z.Keys == nil || *z.Keys < 1 || !z.KeysComplete {
		t.Errorf("zone: %+v", z)
	}

	var k keyAnswer
	api.mustCall("GET", "/sluice/zones/per_ip/keys/127.0.0.1", &k)
	if !k.Present || *k.Remaining > 0.01 || *k.Capacity != 3 || *k.Reset <= 59 || *k.Reset > 60 || *k.Next <= 0 || k.Queued != nil || k.InFlight != nil {
		t.Errorf("the spent key: %v", k)
	}
	wantStatus(t, urls[0], []int{429}) // GET charged nothing
	api.mustCall("DELETE", "/sluice/zones/"+url.PathEscape(siteID("per_ip", p[0]))+"/keys/127.0.0.1", &k)
	if k.Deleted == nil || !*k.Deleted {
		t.Errorf("DELETE: %+v, want deleted", k)
	}
	api.mustCall("GET", "/sluice/zones/per_ip/keys/127.0.0.1", &k)
	if k.Present || *k.Remaining != 3 {
		t.Errorf("after DELETE: %+v, want absent and whole", k)
	}
	wantStatus(t, urls[0], []int{200, 200, 200, 429})
	api.mustCall("DELETE", "/sluice/zones/per_ip/keys/192.0.2.1", &k)
	if *k.Deleted {
		t.Errorf("DELETE of a key never seen: %+v, want deleted false", k)
	}
	return p[0]
}

func TestAdminResetMemory(t *testing.T) {
	testAdminReset(t, nil, "memory")
}

func TestAdminResetRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	port := testAdminReset(t, redisStore(rs.Addr, 2), "redis "+rs.Addr)

	// The API deleted the real key: the one the take script writes,
	// digested.
	c := redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer c.Close()
	sum := sha256.Sum256([]byte(":" + strconv.Itoa(port) + "/127.0.0.1"))
	key := "sluice:{per_ip:token_bucket:#" + hex.EncodeToString(sum[:16]) + "}"
	ctx := context.Background()
	if n, err := c.Exists(ctx, key).Result(); err != nil || n != 1 {
		t.Fatalf("EXISTS %s: %d, %v; want the key the requests wrote", key, n, err)
	}
	_, api := loadWithAdmin(t, server{port: port, handler: map[string]any{"zones": []any{zone("per_ip", "3/m")}, "store": redisStore(rs.Addr, 2)}})
	var k keyAnswer
	api.mustCall("DELETE", "/sluice/zones/per_ip/keys/127.0.0.1", &k)
	if n, err := c.Exists(ctx, key).Result(); err != nil || n != 0 || !*k.Deleted {
		t.Errorf("after DELETE: EXISTS %d, %v; answer %+v", n, err, k)
	}
}

// TestAdminTop ranks clients by rejections, admitted cost and near
// misses, and counts near misses in the metrics.
func TestAdminTop(t *testing.T) {
	p := freePorts(t, 1)
	urls, api := loadWithAdmin(t, server{port: p[0], handler: map[string]any{"zones": []any{
		zone("api", "2/m", "key", "{http.request.header.X-Client}"),
		zone("all", "100/m", "key", "all"),
	}}})
	wantStatus(t, urls[0], []int{200, 200, 429, 429, 429}, "X-Client", "a/b c")
	wantStatus(t, urls[0], []int{200}, "X-Client", "d")
	var top topAnswer
	api.mustCall("GET", "/sluice/zones/api/top", &top)
	if top.Zone != siteID("api", p[0]) || top.Counters != 128 || top.Window != 60 || top.Since.IsZero() {
		t.Errorf("top: %+v", top)
	}
	want := func(name string, got []topEntry, want ...topEntry) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: %+v, want %+v", name, got, want)
			return
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: %+v, want %+v", name, got, want)
			}
		}
	}
	want("rejected", top.Rejected, topEntry{Key: "a/b c", Count: 3})
	want("admitted", top.Admitted, topEntry{Key: "a/b c", Count: 2}, topEntry{Key: "d", Count: 1})
	want("near_limit", top.NearLimit, topEntry{Key: "a/b c", Count: 1})
	api.mustCall("GET", "/sluice/zones/all/top?n=1", &top)
	want("all: admitted", top.Admitted, topEntry{Key: "all", Count: 3}) // rejected requests are charged to no zone
	want("all: rejected", top.Rejected)

	if n := counter(t, siteID("api", p[0]), "near_limit"); n != 1 {
		t.Errorf("near_limit decisions of api: %v, want 1 (besides allowed)", n)
	}
	if n := counter(t, siteID("api", p[0]), "allowed"); n != 3 {
		t.Errorf("allowed decisions of api: %v, want 3", n)
	}

	// The key as /top shows it addresses it, path-escaped.
	var k keyAnswer
	api.mustCall("GET", "/sluice/zones/api/keys/"+url.PathEscape("a/b c"), &k)
	if !k.Present || k.Key != "a/b c" || *k.Remaining > 0.01 {
		t.Errorf("key a/b c: %v", k)
	}
}

// TestAdminErrors checks the API's statuses: unknown zones and paths,
// ambiguous names, bad arguments, wrong methods.
func TestAdminErrors(t *testing.T) {
	p := freePorts(t, 2)
	_, api := loadWithAdmin(t,
		server{port: p[0], handler: map[string]any{"zones": []any{zone("per_ip", "3/m"), zone("solo", "3/m")}}},
		server{port: p[1], handler: map[string]any{"zones": []any{zone("per_ip", "3/m")}}},
	)
	for _, c := range []struct {
		method, path string
		status       int
		msg          string
	}{
		{"GET", "/sluice/zones/nope/keys/1.2.3.4", 404, `unknown zone "nope"`},
		{"GET", "/sluice/zones/per_ip/keys/1.2.3.4", 409, "use an ID: " + strings.Join(sorted(siteID("per_ip", p[0]), siteID("per_ip", p[1])), ", ")},
		{"GET", "/sluice/zones/" + siteID("per_ip", p[1]) + "/keys/1.2.3.4", 200, ""},
		{"GET", "/sluice/zones/solo/keys/", 400, "empty key"},
		{"GET", "/sluice/zones/solo/top?n=0", 400, "want an integer from 1 to 2048"},
		{"GET", "/sluice/zones/solo/top?n=x", 400, "want an integer"},
		{"GET", "/sluice/zones/nope/top", 404, "unknown zone"},
		{"POST", "/sluice/zones/solo/keys/1.2.3.4", 405, "method POST not allowed"},
		{"DELETE", "/sluice/zones", 405, "not allowed"},
		{"PUT", "/sluice/zones/solo/top", 405, "not allowed"},
		{"GET", "/sluice/zone", 404, "resource not found"},
		{"GET", "/sluice/zones/solo/keys/a/b", 404, "resource not found"},
	} {
		var e struct {
			Error string `json:"error"`
		}
		status := api.call(c.method, c.path, &e)
		if status != c.status || !strings.Contains(e.Error, c.msg) {
			t.Errorf("%s %s: %d %q, want %d and an error containing %q", c.method, c.path, status, e.Error, c.status, c.msg)
		}
	}
	var zones zonesAnswer
	api.mustCall("GET", "/sluice/zones", &zones)
	var ids []string
	for _, z := range zones.Zones {
		ids = append(ids, z.ID)
	}
	want := strings.Join(sorted(siteID("per_ip", p[0]), siteID("per_ip", p[1]), siteID("solo", p[0])), " ")
	if got := strings.Join(ids, " "); got != want {
		t.Errorf("zone IDs: %s, want %s", got, want)
	}
}

// TestAdminReload: a reload replaces the zones (the new config's answer
// for an ID, its rankings kept), and stopping Caddy removes them.
func TestAdminReload(t *testing.T) {
	p := freePorts(t, 1)
	h := func(rate string) map[string]any {
		return map[string]any{"zones": []any{zone("api", rate, "key", "{http.request.header.X-Client}")}}
	}
	urls, api := loadWithAdmin(t, server{port: p[0], handler: h("1/m")})
	wantStatus(t, urls[0], []int{200, 429}, "X-Client", "x")
	admin := freePorts(t, 1)[0]
	urls = loadCaddyAdmin(t, admin, server{port: p[0], handler: h("5/m")})
	api.base = "http://127.0.0.1:" + strconv.Itoa(admin)
	var zones zonesAnswer
	api.mustCall("GET", "/sluice/zones", &zones)
	if len(zones.Zones) != 1 || zones.Zones[0].Quota != 5 {
		t.Fatalf("after a reload: %+v, want the new zone alone", zones)
	}
	var top topAnswer
	api.mustCall("GET", "/sluice/zones/api/top", &top)
	if len(top.Rejected) != 1 || top.Rejected[0].Key != "x" {
		t.Errorf("after a reload, rejected: %+v, want x kept", top.Rejected)
	}
	awaitPolicy(t, urls[0], `"api";q=5;`)
	wantStatus(t, urls[0], []int{200, 200, 200, 200, 429}, "X-Client", "x") // the counters kept: 1 spent of 5
	if err := caddy.Stop(); err != nil {
		t.Fatal(err)
	}
	if n := len(registeredZones()); n != 0 {
		t.Errorf("after stop: %d zones registered, want 0", n)
	}
	n := 0
	watches.Range(func(any, any) bool { n++; return true })
	if n != 0 {
		t.Errorf("after stop: %d sketches in the pool, want 0", n)
	}
}

// awaitPolicy waits (2 s at most) until url answers with a RateLimit-Policy
// beginning with policy, asking as clients of their own: right after a
// reload, the previous config's server may still accept a connection on
// the shared listener and answer it (see fetch).
func awaitPolicy(t *testing.T, url, policy string) {
	t.Helper()
	for i := 0; i < 100; i++ {
		r := get(t, url, "X-Client", "await-"+strconv.Itoa(i))
		if strings.HasPrefix(r.header.Get("RateLimit-Policy"), policy) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s does not answer with the policy %s after 2 s", url, policy)
}

// testAdminLongKey: a key longer than keyspec.MaxKeyLength (a JWT), which
// /top shows as its digest, is read and reset by that name and by the
// raw key alike: every name /top shows works in the key endpoints.
func testAdminLongKey(t *testing.T, store map[string]any) {
	p := freePorts(t, 1)
	h := map[string]any{"zones": []any{zone("jwt", "2/m", "key", "{http.request.header.Authorization}")}}
	if store != nil {
		h["store"] = store
	}
	urls, api := loadWithAdmin(t, server{port: p[0], handler: h})
	token := "Bearer " + strings.Repeat("eyJhbGciOiJIUzI1NiJ9.", 12)
	digest := keyspec.BoundKey(token)
	if len(token) <= keyspec.MaxKeyLength || digest == token {
		t.Fatalf("token of %d bytes kept verbatim", len(token))
	}
	wantStatus(t, urls[0], []int{200, 200, 429}, "Authorization", token)

	var top topAnswer
	api.mustCall("GET", "/sluice/zones/jwt/top", &top)
	if len(top.Rejected) != 1 || top.Rejected[0].Key != digest {
		t.Fatalf("top rejected: %+v, want the digest %s", top.Rejected, digest)
	}
	for _, name := range []string{digest, token} {
		var k keyAnswer
		path := "/sluice/zones/jwt/keys/" + url.PathEscape(name)
		api.mustCall("GET", path, &k)
		if !k.Present || *k.Remaining > 0.01 || k.Key != digest {
			t.Errorf("GET by %.20q…: %v, want present, none remaining, named by the digest", name, k)
		}
		api.mustCall("DELETE", path, &k)
		if k.Deleted == nil || !*k.Deleted || k.Key != digest {
			t.Errorf("DELETE by %.20q…: %v, want deleted", name, k)
		}
		wantStatus(t, urls[0], []int{200, 200, 429}, "Authorization", token)
	}
}

func TestAdminLongKeyMemory(t *testing.T) {
	testAdminLongKey(t, nil)
}

func TestAdminLongKeyRedis(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	testAdminLongKey(t, redisStore(rs.Addr, 2))
}

// TestAdminAnswerForm checks the form of the answers against docs/caddy.md:
// rates as written, no rate fields for a zone of max_in_flight alone,
// cost units to the thousandth and times to the millisecond, queued only
// for a zone that delays requests, and /top's scope.
func TestAdminAnswerForm(t *testing.T) {
	p := freePorts(t, 1)
	urls, api := loadWithAdmin(t, server{port: p[0], handler: map[string]any{"zones": []any{
		zone("tb", "30/1m"),
		zone("lb", "2/1s", "algorithm", "leaky_bucket", "burst", 3),
		map[string]any{"name": "conc", "key": "all", "max_in_flight": 2},
	}}})
	wantStatus(t, urls[0], []int{200})

	var zones struct{ Zones []map[string]any }
	api.mustCall("GET", "/sluice/zones", &zones)
	byName := map[string]map[string]any{}
	for _, z := range zones.Zones {
		byName[z["name"].(string)] = z
	}
	if z := byName["tb"]; z["rate"] != "30/1m" || z["quota"] != 30.0 || z["period_seconds"] != 60.0 || z["burst"] != 30.0 {
		t.Errorf("zone tb: %v, want rate 30/1m, quota 30, period_seconds 60, burst 30", z)
	}
	if z := byName["lb"]; z["rate"] != "2/1s" {
		t.Errorf("zone lb: %v, want rate 2/1s", z)
	}
	z := byName["conc"]
	for _, f := range []string{"algorithm", "rate", "quota", "period_seconds", "burst"} {
		if v, ok := z[f]; ok {
			t.Errorf("zone conc (max_in_flight alone): %s %v, want it omitted", f, v)
		}
	}
	if z["max_in_flight"] != 2.0 {
		t.Errorf("zone conc: %v, want max_in_flight 2", z)
	}

	thousandths := func(name string, v any) {
		t.Helper()
		x, ok := v.(float64)
		text := strconv.FormatFloat(x, 'f', -1, 64)
		if dot := strings.IndexByte(text, '.'); !ok || dot >= 0 && len(text)-dot-1 > 3 {
			t.Errorf("%s: %v, want a number to the thousandth", name, v)
		}
	}
	for _, c := range []struct {
		zone   string
		queued bool
	}{{"tb", false}, {"lb", true}} {
		var k map[string]any
		api.mustCall("GET", "/sluice/zones/"+c.zone+"/keys/127.0.0.1", &k)
		if k["present"] != true {
			t.Errorf("%s: %v, want present", c.zone, k)
		}
		for _, f := range []string{"remaining", "reset_seconds", "next_seconds"} {
			thousandths(c.zone+" "+f, k[f])
		}
		if _, ok := k["queued"]; ok != c.queued {
			t.Errorf("%s: %v; want queued given %v", c.zone, k, c.queued)
		} else if ok {
			thousandths(c.zone+" queued", k["queued"])
		}
	}
	var top map[string]any
	api.mustCall("GET", "/sluice/zones/tb/top", &top)
	if top["scope"] != "instance" {
		t.Errorf("top: %v, want scope instance", top)
	}
}

// TestCeilMilli: every whole number of milliseconds prints as its decimal
// (1997 ms as 1.997, not 1.9969999999999999), and a part of one rounds up.
func TestCeilMilli(t *testing.T) {
	for ms := int64(0); ms < 100000; ms++ {
		d := time.Duration(ms) * time.Millisecond
		want := strconv.FormatInt(ms/1000, 10) + "." + fmt.Sprintf("%03d", ms%1000)
		got := strconv.FormatFloat(ceilMilli(d), 'f', -1, 64)
		if w, _ := strconv.ParseFloat(want, 64); strconv.FormatFloat(w, 'f', -1, 64) != got {
			t.Fatalf("ceilMilli(%v) prints %s, want %s", d, got, want)
		}
	}
	if got := ceilMilli(1996*time.Millisecond + 1); got != 1.997 {
		t.Errorf("ceilMilli(1.996000001s) = %v, want 1.997", got)
	}
}

// TestAdminAdvice: a zone's demand per key and period, on a fake clock,
// read through GET /sluice/zones/<zone>/advice (with a candidate of the
// operator's) and the demand metrics, then forgotten by DELETE.
func TestAdminAdvice(t *testing.T) {
	now := int64(1e9) * 1800000000 // a whole minute
	testClock = func() int64 { return atomic.LoadInt64(&now) }
	t.Cleanup(func() { testClock = nil })
	p := freePorts(t, 1)
	urls, api := loadWithAdmin(t, server{port: p[0], handler: map[string]any{"zones": []any{
		zone("api", "2/m", "key", "{http.request.header.X-Client}"),
		map[string]any{"name": "slots", "max_in_flight": 1},
	}}})
	wantStatus(t, urls[0], []int{200, 200, 429}, "X-Client", "a")
	wantStatus(t, urls[0], []int{200}, "X-Client", "b")
	var adv demand.Advice
	api.mustCall("GET", "/sluice/zones/api/advice", &adv)
	if adv.KeyPeriods != 0 || adv.FollowedKeys != 2 {
		t.Fatalf("within the first minute: %d key-periods, %d keys followed; want 0 (none over), 2", adv.KeyPeriods, adv.FollowedKeys)
	}
	atomic.AddInt64(&now, int64(time.Minute))
	api.mustCall("GET", "/sluice/zones/api/advice?candidate=1/m", &adv)
	if adv.Zone != siteID("api", p[0]) || adv.Period != "1m" || adv.Keys != 2 || adv.KeyPeriods != 2 || adv.Cost != 4 || adv.Demand.Max != 3 {
		t.Fatalf("advice: %+v; want zone api@127.0.0.1:<port>, period 1m, 2 keys, 2 key-periods asking 4, max 3 (the refused request counts)", adv)
	}
	want := map[string]float64{"configured": 0, "half": 0.5, "double": 0, "asked": 0.5} // share of key-periods refused
	for _, c := range adv.Candidates {
		if w, ok := want[c.Name]; ok && c.KeyPeriods.Value != w {
			t.Errorf("candidate %s (%s, allowance %v): refuses %v of the key-periods, want %v", c.Name, c.Rate, c.Allowance, c.KeyPeriods.Value, w)
		}
		delete(want, c.Name)
	}
	if len(want) != 0 {
		t.Errorf("candidates missing: %v (got %+v)", want, adv.Candidates)
	}

	var q, kp float64
	for _, m := range family(t, "sluice_demand").GetMetric() {
		if label(m, "zone") == siteID("api", p[0]) && label(m, "quantile") == "1" {
			q = m.GetGauge().GetValue()
		}
	}
	for _, m := range family(t, "sluice_demand_key_periods_total").GetMetric() {
		if label(m, "zone") == siteID("api", p[0]) {
			kp = m.GetCounter().GetValue()
		}
	}
	if q != 3 || kp != 2 {
		t.Errorf("metrics: largest demand %v, key-periods %v; want 3, 2", q, kp)
	}

	if status := api.call("GET", "/sluice/zones/api/advice?candidate=fast", nil); status != http.StatusBadRequest {
		t.Errorf("a bad candidate: status %d, want 400", status)
	}
	if status := api.call("GET", "/sluice/zones/slots/advice", nil); status != http.StatusNotFound {
		t.Errorf("a zone without a rate: status %d, want 404", status)
	}
	if status := api.call("DELETE", "/sluice/zones/api/advice", nil); status != http.StatusNoContent {
		t.Fatalf("DELETE advice: status %d, want 204", status)
	}
	api.mustCall("GET", "/sluice/zones/api/advice", &adv)
	if adv.KeyPeriods != 0 || adv.FollowedKeys != 0 || !adv.Since.Equal(time.Unix(0, now).UTC()) {
		t.Errorf("after DELETE: %+v, want nothing since %v", adv, time.Unix(0, now).UTC())
	}
}

// TestAdminAdviceFleet: with demand_scope fleet, the advice reads the
// demand that every instance recording the zone in the same Redis saw:
// this Caddy saw three of client a's asks, another instance (a store of
// the test's own, its zone named alike) two more, and the advice holds a
// key-period of 5. DELETE resets it for every instance.
func TestAdminAdviceFleet(t *testing.T) {
	rs := redistest.Start(t, redistest.Options{})
	start := int64(time.Minute) * 29_000_000 // a whole minute
	now := start
	testClock = func() int64 { return atomic.LoadInt64(&now) }
	t.Cleanup(func() { testClock = nil })
	p := freePorts(t, 1)
	urls, api := loadWithAdmin(t, server{port: p[0], handler: map[string]any{
		"zones": []any{zone("api", "2/m", "key", "{http.request.header.X-Client}", "demand_scope", "fleet")},
		"store": redisStore(rs.Addr, 2),
	}})
	wantStatus(t, urls[0], []int{200, 200, 429}, "X-Client", "a")
	wantStatus(t, urls[0], []int{200}, "X-Client", "b")

	other, err := redisstore.New(redisstore.Config{Client: resptest.Client(t, rs.Addr, 1)})
	if err != nil {
		t.Fatal(err)
	}
	l := &model.Limit{Name: "api", Rate: model.Rate{Quota: 2, Period: time.Minute}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	d := other.Demand(l, ":"+strconv.Itoa(p[0])+"/", 0, func() int64 { return start })
	d.Recorder().Add(start+int64(time.Second), "a", 2)
	end := start + int64(time.Minute) + int64(4*time.Second) // the minute sent by every instance
	d.Recorder().Snapshot(end)
	if err := d.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	atomic.StoreInt64(&now, end)
	var adv demand.Advice
	api.mustCall("GET", "/sluice/zones/api/advice", &adv)
	if adv.Scope != "fleet" || adv.Keys != 2 || adv.KeyPeriods != 2 || adv.Cost != 6 || adv.Demand.Max != 5 || adv.Since.UnixNano() > start {
		t.Fatalf("fleet advice: %+v; want scope fleet, 2 keys, 2 key-periods asking 6, the largest 5 (3 here, 2 in the other instance)", adv)
	}
	for _, m := range family(t, "sluice_demand_key_periods_total").GetMetric() {
		if strings.HasPrefix(label(m, "zone"), "api@") {
			t.Errorf("a fleet zone's demand exported by one instance's metrics: %v", m)
		}
	}
	if status := api.call("DELETE", "/sluice/zones/api/advice", nil); status != http.StatusNoContent {
		t.Fatalf("DELETE advice: status %d, want 204", status)
	}
	if s, err := d.Snapshot(context.Background(), end); err != nil || s.Periods.Count() != 0 {
		t.Errorf("the other instance after the reset: %d key-periods (%v), want none", s.Periods.Count(), err)
	}
	if status := api.call("GET", "/sluice/zones/api/advice?candidate=fast", nil); status != http.StatusBadRequest {
		t.Errorf("a bad candidate: status %d, want 400", status)
	}
}

// TestAdminPenalty: the key view of a zone with a penalty gives the
// time a refused client is still held out, and DELETE lets it in again.
func TestAdminPenalty(t *testing.T) {
	p := freePorts(t, 1)
	z := zone("login", "2/m")
	z["penalty"] = "15m"
	urls, api := loadWithAdmin(t, server{port: p[0], handler: map[string]any{"zones": []any{z}}})
	wantStatus(t, urls[0], []int{200, 200, 429, 429})
	var k keyAnswer
	api.mustCall("GET", "/sluice/zones/login/keys/127.0.0.1", &k)
	if !k.Present || *k.Remaining != 0 || k.Penalty == nil || *k.Penalty <= 890 || *k.Penalty > 900 || *k.Next != *k.Penalty {
		t.Errorf("the key held out: %v, want its penalty of up to 900 s", k)
	}
	api.mustCall("DELETE", "/sluice/zones/login/keys/127.0.0.1", &k)
	api.mustCall("GET", "/sluice/zones/login/keys/127.0.0.1", &k)
	if k.Present || k.Penalty == nil || *k.Penalty != 0 {
		t.Errorf("after DELETE: %v, want absent, penalty 0", k)
	}
	wantStatus(t, urls[0], []int{200, 200, 429})
}
