package traefikplugin

import (
	"strings"
	"testing"
)

// FuzzParseLabels decodes label strings, as Docker and Kubernetes give
// them, into a configuration and parses it: no panic, and an error names
// the option it is about.
func FuzzParseLabels(f *testing.F) {
	f.Add("100", "1m", "50", "token_bucket", "client_ip,header:X-Key", "10.0.0.0/8", "1")
	f.Add("0.5", "2s", "", "leaky_bucket", "const:global", "", "2")
	f.Add("1e309", "-1s", "NaN", "gcra", "header:", "10.0.0.0/33", "0")
	f.Add("5", "10", "1", "fixed_window", "query:k,cookie:c", "::1,203.0.113.7", "x")
	f.Fuzz(func(t *testing.T, average, period, burst, algorithm, key, networks, depth string) {
		labels := map[string]interface{}{
			"average": average, "period": period, "burst": burst, "algorithm": algorithm, "key": key,
			"exemptIPs": networks, "trustedProxies": networks, "headers": algorithm, "cost": burst,
			"sourceCriterion": map[string]interface{}{"ipStrategy": map[string]interface{}{"depth": depth, "excludedIPs": networks, "ipv6Subnet": depth}},
			"limits":          []interface{}{map[string]interface{}{"name": algorithm, "average": burst, "key": key}},
		}
		cfg := CreateConfig()
		if err := decodeLikeTraefik(labels, cfg); err != nil {
			return // mapstructure refused it; Traefik would have too
		}
		if _, err := parse(cfg, "fuzz@docker"); err != nil && !strings.Contains(err.Error(), ":") {
			t.Fatalf("error %q names no option", err)
		}
	})
}
