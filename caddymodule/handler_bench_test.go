package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// BenchmarkServeHTTP measures the handler's own cost per admitted request
// with the memory store: zone matching, key expansion, the decision,
// headers, placeholders and metrics.
func BenchmarkServeHTTP(b *testing.B) {
	for _, bc := range []struct {
		name  string
		zones []*Zone
	}{
		{"client_ip", []*Zone{{Name: "ip", Rate: "1e9/s"}}},
		{"header_key", []*Zone{{Name: "key", Rate: "1e9/s", Key: "{http.request.header.X-API-Key}"}}},
		{"three_zones", []*Zone{
			{Name: "ip", Rate: "1e9/s", IPv4Prefix: 24},
			{Name: "key", Rate: "1e9/s", Key: "{http.request.header.X-API-Key}"},
			{Name: "global", Rate: "1e9/s", Key: "all", Algorithm: "sliding_window_counter"},
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			h := &Handler{Zones: bc.zones}
			provisionHandler(b, h)
			next := caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error { return nil })
			reqs := make([]*http.Request, 256)
			for i := range reqs {
				reqs[i], _ = testRequest("203.0.113."+strconv.Itoa(i), map[string]string{"X-API-Key": "k" + strconv.Itoa(i)})
			}
			w := httptest.NewRecorder()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				clear(w.Header())
				if err := h.ServeHTTP(w, reqs[i%len(reqs)], next); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
