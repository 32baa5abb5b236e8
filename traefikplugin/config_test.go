package traefikplugin

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/answer"
	"github.com/sluicehq/sluice/core/clientip"
	"github.com/sluicehq/sluice/core/keyspec"
	"github.com/sluicehq/sluice/core/model"
)

// labelConfig is a configuration as Docker labels give it: every value a
// string, lists comma-separated, list items indexed.
var labelConfig = map[string]interface{}{
	"average": "100",
	"period":  "60",
	"burst":   "50",
	"sourceCriterion": map[string]interface{}{
		"ipStrategy": map[string]interface{}{"depth": "2", "ipv6Subnet": "64"},
	},
	"algorithm":      "token_bucket",
	"cost":           "1.5",
	"key":            "client_ip,header:X-Tenant",
	"onMissingKey":   "shared",
	"headers":        "ietf,legacy",
	"body":           "problem",
	"mode":           "dry_run",
	"onStoreError":   "deny",
	"fallback":       "local",
	"instances":      "3",
	"retryJitter":    "0.2",
	"trustedProxies": "10.0.0.0/8,192.168.0.1",
	"limits": []interface{}{
		map[string]interface{}{"name": "global", "average": "1000", "period": "1m", "burst": "2", "key": "const:global"},
		map[string]interface{}{"name": "slow", "average": "10", "algorithm": "leaky_bucket", "maxDelay": "0.5", "onMissingKey": "skip"},
	},
	"redis": map[string]interface{}{
		"endpoints":    "127.0.0.1:6379",
		"username":     "app",
		"password":     "secret",
		"db":           "2",
		"poolSize":     "4",
		"dialTimeout":  "2",
		"readTimeout":  "250ms",
		"writeTimeout": "0.25",
		"timeout":      "0.3",
		"tls":          map[string]interface{}{"insecureSkipVerify": "true"},
	},
}

// yamlConfig is the same configuration as the file provider or a
// Kubernetes CRD gives it: typed numbers, booleans and lists, and keys in
// other letter cases.
var yamlConfig = map[string]interface{}{
	"Average": 100,
	"PERIOD":  60,
	"burst":   50.0,
	"sourcecriterion": map[string]interface{}{
		"IPStrategy": map[string]interface{}{"depth": 2, "ipv6subnet": 64.0},
	},
	"algorithm":      "token_bucket",
	"cost":           1.5,
	"key":            []interface{}{"client_ip", "header:X-Tenant"},
	"onMissingKey":   "shared",
	"headers":        []interface{}{"ietf", "legacy"},
	"body":           "problem",
	"mode":           "dry_run",
	"onStoreError":   "deny",
	"fallback":       "local",
	"instances":      int64(3),
	"retryJitter":    0.2,
	"trustedProxies": []interface{}{"10.0.0.0/8", "192.168.0.1"},
	"limits": []interface{}{
		map[string]interface{}{"name": "global", "average": 1000, "period": "1m", "burst": 2, "key": []interface{}{"const:global"}},
		map[string]interface{}{"name": "slow", "average": 10, "algorithm": "leaky_bucket", "maxDelay": "500ms", "onMissingKey": "skip"},
	},
	"redis": map[string]interface{}{
		"endpoints":      []interface{}{"127.0.0.1:6379"},
		"username":       "app",
		"password":       "secret",
		"db":             2,
		"poolSize":       4,
		"dialTimeout":    "2s",
		"readTimeout":    "250ms",
		"writeTimeout":   "250ms",
		"timeout":        "300ms",
		"maxActiveConns": 8, // caps the pool with poolSize: 4 stays
		"tls":            map[string]interface{}{"insecureSkipVerify": true},
	},
}

// TestDecodeLabelsAndYAML decodes the same configuration written as labels
// and as typed YAML, and checks that both parse to the same settings.
func TestDecodeLabelsAndYAML(t *testing.T) {
	for _, tc := range []struct {
		name string
		raw  map[string]interface{}
	}{
		{"labels", labelConfig},
		{"yaml", yamlConfig},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := CreateConfig()
			if err := decodeLikeTraefik(tc.raw, cfg); err != nil {
				t.Fatalf("decode: %v", err)
			}
			s, err := parse(cfg, "api@docker")
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			checkFullSettings(t, s)
		})
	}
}

// checkFullSettings checks the settings of labelConfig and yamlConfig.
func checkFullSettings(t *testing.T, s *settings) {
	t.Helper()
	if len(s.plans) != 3 {
		t.Fatalf("got %d limits, want 3", len(s.plans))
	}
	type want struct {
		name     string
		alg      model.Algorithm
		quota    float64
		period   time.Duration
		burst    float64
		maxDelay time.Duration
		cost     float64
		missing  keyspec.MissingKey
	}
	wants := []want{
		// A token_bucket's default maxDelay is the built-in's 1/(2·rate),
		// the rate truncated to whole requests per second: 100/m is
		// below 2/s (500 ms), 1000/m is 16/s (31.25 ms).
		{"default", model.TokenBucket, 100, time.Minute, 50, 500 * time.Millisecond, 1.5, keyspec.MissingShared},
		{"global", model.TokenBucket, 1000, time.Minute, 2, 31250 * time.Microsecond, 1.5, keyspec.MissingShared},
		{"slow", model.LeakyBucket, 10, time.Second, 0, 500 * time.Millisecond, 1.5, keyspec.MissingSkip},
	}
	for i, w := range wants {
		p := s.plans[i]
		l := p.limit
		got := want{l.Name, l.Algorithm, l.Rate.Quota, l.Rate.Period, l.Burst, l.MaxDelay, p.cost, p.missing}
		if got != w {
			t.Errorf("limit %d: got %+v, want %+v", i, got, w)
		}
	}
	if len(s.specs) != 2 || s.plans[0].spec != 0 || s.plans[1].spec != 1 || s.plans[2].spec != 0 {
		t.Errorf("key specs: got %d specs, plans use %d %d %d; want 2, 0 1 0", len(s.specs), s.plans[0].spec, s.plans[1].spec, s.plans[2].spec)
	}
	// A variable, not the constant expression: Yaegi v0.16.1 compares a
	// value with an | of another package's typed constants as unequal.
	headers := answer.HeadersIETF | answer.HeadersLegacy
	if s.responder.Headers != headers || s.responder.Body != answer.BodyProblem || s.responder.Jitter != 0.2 {
		t.Errorf("responder: got %+v", s.responder)
	}
	if s.mode != core.DryRun || s.policy != core.FailClosed || !s.fallback || s.instances != 3 {
		t.Errorf("mode %v, policy %v, fallback %v, instances %d", s.mode, s.policy, s.fallback, s.instances)
	}
	r := s.redis
	if r == nil {
		t.Fatal("no redis settings")
	}
	o := r.resp
	if o.Addr != "127.0.0.1:6379" || o.Username != "app" || o.Password != "secret" || o.DB != 2 || o.PoolSize != 4 ||
		o.DialTimeout != 2*time.Second || o.ReadTimeout != 250*time.Millisecond || o.WriteTimeout != 250*time.Millisecond {
		t.Errorf("redis options: got %+v", o)
	}
	if o.TLS == nil || !o.TLS.InsecureSkipVerify {
		t.Errorf("redis TLS: got %+v", o.TLS)
	}
	if r.timeout != 300*time.Millisecond {
		t.Errorf("store timeout: got %v, want 300ms", r.timeout)
	}
}

// TestClientIPFromSourceCriterion checks how ipStrategy and
// trustedProxies become the client_ip rule.
func TestClientIPFromSourceCriterion(t *testing.T) {
	p := func(s ...string) []netip.Prefix {
		out := make([]netip.Prefix, len(s))
		for i, x := range s {
			out[i] = netip.MustParsePrefix(x)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		want clientip.Strategy
		note string
	}{
		{"none", Config{}, clientip.Strategy{TrustedProxies: []netip.Prefix{}}, ""},
		{"empty ipStrategy", Config{SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{}}}, clientip.Strategy{TrustedProxies: []netip.Prefix{}}, ""},
		{"depth trusts Traefik's entryPoint", Config{SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{Depth: "1"}}},
			clientip.Strategy{TrustedProxies: []netip.Prefix{}, AnyPeer: true, Depth: 1}, ""},
		{"depth with trustedProxies", Config{TrustedProxies: []string{"10.0.0.0/8"}, SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{Depth: "2"}}},
			clientip.Strategy{TrustedProxies: p("10.0.0.0/8"), Depth: 2}, ""},
		{"depth wins over excludedIPs", Config{SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{Depth: "1", ExcludedIPs: []string{"10.0.0.1"}}}},
			clientip.Strategy{TrustedProxies: []netip.Prefix{}, AnyPeer: true, Depth: 1}, "excludedIPs is ignored"},
		{"excludedIPs believe any peer, as the built-in does", Config{SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{ExcludedIPs: []string{"10.0.0.1", "10.1.0.0/16"}}}},
			clientip.Strategy{TrustedProxies: []netip.Prefix{}, AnyPeer: true, ExcludedIPs: p("10.0.0.1/32", "10.1.0.0/16")}, ""},
		{"excludedIPs with trustedProxies", Config{TrustedProxies: []string{"172.16.0.0/12"}, SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{ExcludedIPs: []string{"10.0.0.1"}}}},
			clientip.Strategy{TrustedProxies: p("172.16.0.0/12"), ExcludedIPs: p("10.0.0.1/32")}, ""},
		{"ipv6Subnet", Config{SourceCriterion: &SourceCriterion{IPStrategy: &IPStrategy{IPv6Subnet: "56"}}},
			clientip.Strategy{TrustedProxies: []netip.Prefix{}, IPv6Prefix: 56}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &settings{}
			cfg := tc.cfg
			o := &options{}
			got := parseClientIP(&cfg, cfg.SourceCriterion.ipStrategy(), s, o)
			if o.err != nil {
				t.Fatal(o.err)
			}
			if !reflect.DeepEqual(*got, tc.want) {
				t.Errorf("got %+v, want %+v", *got, tc.want)
			}
			notes := strings.Join(s.notes, "\n")
			if (tc.note == "") != (notes == "") || !strings.Contains(notes, tc.note) {
				t.Errorf("notes %q, want one containing %q", notes, tc.note)
			}
		})
	}
}

// ipStrategy returns the strategy of sc, which may be nil.
func (sc *SourceCriterion) ipStrategy() *IPStrategy {
	if sc == nil {
		return nil
	}
	return sc.IPStrategy
}

// TestParseValues checks the parsers' accepted forms and defaults.
func TestParseValues(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"0", 0}, {"1", time.Second}, {"60", time.Minute}, {"1.5", 1500 * time.Millisecond},
		{"1m", time.Minute}, {"1m30s", 90 * time.Second}, {" 250ms ", 250 * time.Millisecond},
	} {
		o := &options{}
		if got := o.duration("period", tc.in); o.err != nil || got != tc.want {
			t.Errorf("duration(%q) = %v, %v; want %v", tc.in, got, o.err, tc.want)
		}
	}
	for _, in := range []string{"1", "true", "TRUE", "t"} {
		o := &options{}
		if b := o.boolean("x", in); o.err != nil || !b {
			t.Errorf("boolean(%q) = %v, %v; want true", in, b, o.err)
		}
	}
	for _, in := range []string{"", "0", "false", "F"} {
		o := &options{}
		if b := o.boolean("x", in); o.err != nil || b {
			t.Errorf("boolean(%q) = %v, %v; want false", in, b, o.err)
		}
	}
	o := &options{}
	if n := o.integer("depth", "3.0", 0, 32); o.err != nil || n != 3 {
		t.Errorf(`integer("3.0") = %d, %v; want 3`, n, o.err)
	}
	if got := parseList([]string{" a, b ", "", "c,"}); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("parseList: got %q", got)
	}
}

// TestDefaults checks Traefik's defaults: period one second, burst 1, and
// no limit at all for average 0.
func TestDefaults(t *testing.T) {
	s, err := parse(&Config{Average: "5"}, "api@file")
	if err != nil {
		t.Fatal(err)
	}
	l := s.plans[0].limit
	if l.Name != "default" || l.Algorithm != model.TokenBucket || l.Rate != (model.Rate{Quota: 5, Period: time.Second}) || l.Burst != 1 || s.plans[0].cost != 1 {
		t.Errorf("got %+v cost %v", *l, s.plans[0].cost)
	}
	headers := answer.DefaultHeaders // a variable, for Yaegi (see checkFullSettings)
	if s.responder.Headers != headers || s.responder.Body != answer.BodyJSON || s.mode != core.Enforce || s.policy != core.FailOpen || s.redis != nil {
		t.Errorf("got %+v", s)
	}
	for _, avg := range []string{"", "0", "0.0"} {
		s, err := parse(&Config{Average: avg, Burst: "7"}, "api@file")
		if err != nil || len(s.plans) != 0 {
			t.Errorf("average %q: got %d limits, %v; want none", avg, len(s.plans), err)
		}
	}
	s, err = parse(&Config{Average: "5", Algorithm: "leaky_bucket"}, "api@file")
	if err != nil || s.plans[0].limit.Capacity() != 5 {
		t.Errorf("leaky_bucket without burst: capacity %v, %v; want the quota, 5", s.plans[0].limit.Capacity(), err)
	}
	s, err = parse(&Config{Limits: []LimitConfig{{Name: "off", Average: "0"}}}, "api@file")
	if err != nil || len(s.plans) != 0 {
		t.Errorf("limit with average 0: got %d limits, %v; want none", len(s.plans), err)
	}
	s, err = parse(&Config{Redis: &Redis{}, Average: "1"}, "api@file")
	if err != nil || s.redis.resp.Addr != "localhost:6379" {
		t.Errorf("redis without endpoints: got %+v, %v; want localhost:6379", s.redis, err)
	}
	s, err = parse(&Config{Redis: &Redis{Endpoints: []string{"127.0.0.1:7000", "127.0.0.1:7001"}}, Average: "1"}, "api@file")
	if err != nil || len(s.redis.seeds) != 2 || len(s.notes) != 1 || !strings.Contains(s.notes[0], "a Redis Cluster seed list") {
		t.Errorf("several endpoints: got %+v, notes %q, %v", s.redis, s.notes, err)
	}
}

// TestItemDefaults checks what a Limits item takes from the top level.
func TestItemDefaults(t *testing.T) {
	cfg := &Config{
		Algorithm: "leaky_bucket", MaxDelay: "2s", Cost: "2", Key: []string{"header:X-Key"}, OnMissingKey: "shared",
		Limits: []LimitConfig{
			{Name: "inherit", Average: "10"},
			{Name: "own", Average: "10", Algorithm: "fixed_window", Key: []string{"host"}, Cost: "3"},
		},
	}
	s, err := parse(cfg, "api@file")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.plans) != 2 {
		t.Fatalf("got %d limits, want 2", len(s.plans))
	}
	a, b := s.plans[0], s.plans[1]
	if a.limit.Algorithm != model.LeakyBucket || a.limit.MaxDelay != 2*time.Second || a.cost != 2 || a.missing != keyspec.MissingShared || a.spec != 0 {
		t.Errorf("inheriting item: got %+v, limit %+v", a, *a.limit)
	}
	if b.limit.Algorithm != model.FixedWindow || b.limit.MaxDelay != 0 || b.cost != 3 || b.missing != keyspec.MissingShared || b.spec != 1 {
		t.Errorf("own item: got %+v, limit %+v", b, *b.limit)
	}
}

// TestResponseCostOptions: costHeader and costBytes, at the top level and
// in a limits item (not inherited), decoded from labels' strings; a limit
// with one is charged an estimate of 0 unless cost says otherwise, "0"
// included, and the others keep the default of 1.
func TestResponseCostOptions(t *testing.T) {
	cfg := CreateConfig()
	raw := map[string]interface{}{
		"average": "10000", "period": "1m", "burst": "10000", "costHeader": "X-Tokens-Used",
		"limits": []interface{}{
			map[string]interface{}{"name": "bytes", "average": "1000000", "period": "1m", "burst": "1000000", "costBytes": "true", "cost": "100"},
			map[string]interface{}{"name": "requests", "average": "10"},
		},
	}
	if err := decodeLikeTraefik(raw, cfg); err != nil {
		t.Fatal(err)
	}
	s, err := parse(cfg, "api@docker")
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		header string
		bytes  bool
		cost   float64
	}
	wants := []want{{"X-Tokens-Used", false, 0}, {"", true, 100}, {"", false, 1}}
	for i, p := range s.plans {
		if got := (want{p.limit.CostHeader, p.limit.CostBytes, p.cost}); got != wants[i] {
			t.Errorf("limit %q: got %+v, want %+v", p.limit.Name, got, wants[i])
		}
	}
	s, err = parse(&Config{Average: "5", Cost: "0", CostBytes: "true"}, "api@file")
	if err != nil || s.plans[0].cost != 0 {
		t.Errorf(`cost "0" with costBytes: got %v; want 0`, err)
	}
}

// TestRefusedBuiltinOptions: options of the built-in's redis block that
// the plugin cannot honour fail at New, naming the option and what to use
// instead; maxActiveConns caps the pool.
func TestRefusedBuiltinOptions(t *testing.T) {
	for _, tc := range []struct {
		redis map[string]interface{}
		want  string
	}{
		{map[string]interface{}{"secret": "redis-auth"}, "redis.secret: the plugin cannot read Kubernetes secrets; set redis.password to env:NAME"},
		{map[string]interface{}{"tls": map[string]interface{}{"caSecret": "ca"}}, "redis.tls.caSecret:"},
		{map[string]interface{}{"tls": map[string]interface{}{"certSecret": "cert"}}, "redis.tls.certSecret:"},
		{map[string]interface{}{"minIdleConns": "2"}, "redis.minIdleConns: not supported"},
	} {
		cfg := CreateConfig()
		if err := decodeLikeTraefik(map[string]interface{}{"average": "10", "redis": tc.redis}, cfg); err != nil {
			t.Fatal(err)
		}
		if _, err := parse(cfg, "api@file"); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("redis %v: error %v, want one containing %q", tc.redis, err, tc.want)
		}
	}
	for _, tc := range []struct {
		pool, maxActive string
		want            int
	}{{"", "3", 3}, {"10", "3", 3}, {"2", "3", 2}, {"5", "", 5}} {
		cfg := CreateConfig()
		raw := map[string]interface{}{"average": "10", "redis": map[string]interface{}{"poolSize": tc.pool, "maxActiveConns": tc.maxActive}}
		if err := decodeLikeTraefik(raw, cfg); err != nil {
			t.Fatal(err)
		}
		s, err := parse(cfg, "api@file")
		if err != nil {
			t.Fatal(err)
		}
		if got := s.redis.resp.PoolSize; got != tc.want {
			t.Errorf("poolSize %q, maxActiveConns %q: pool of %d, want %d", tc.pool, tc.maxActive, got, tc.want)
		}
	}
}
