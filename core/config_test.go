package core

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core/model"
	"github.com/sluicehq/sluice/core/redisstore"
)

func TestCheckLimitName(t *testing.T) {
	tests := []struct {
		name, err string
	}{
		{"api", ""},
		{"api-v2.read_only", ""},
		{"", "name: must not be empty"},
		{`a"b`, `name "a\"b": must not contain`},
		{`a\b`, "must not contain"},
		{"a:b", "must not contain"},
		{"a{b", "must not contain"},
		{"a}b", "must not contain"},
		{"a\rb", "must not contain"},
		{"a\nb", "must not contain"},
	}
	for _, tt := range tests {
		err := model.CheckLimitName(tt.name)
		if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("CheckLimitName(%q) = %v, want %q", tt.name, err, tt.err)
		}
	}
	// Validate uses it.
	l := model.Limit{Name: "a:b", Rate: model.Rate{Quota: 1, Period: time.Second}}
	if err := l.Validate(); err == nil || !strings.Contains(err.Error(), `name "a:b"`) {
		t.Errorf("Validate: %v", err)
	}
}

func TestParseCost(t *testing.T) {
	tests := []struct {
		s    string
		want float64
		err  string
	}{
		{"1", 1, ""},
		{"2.5", 2.5, ""},
		{"1e3", 1000, ""},
		{"0.001", 0.001, ""},
		{"0", 0, ""},
		{"-2", 0, "must not be negative"},
		{"", 0, "not a number"},
		{" 1", 0, "not a number"},
		{"lots", 0, "not a number"},
		{"NaN", 0, "not a number"},
		{"Inf", 0, "not a number"},
		{"-Inf", 0, "not a number"},
		{"1e400", 0, "not a number"},
	}
	for _, tt := range tests {
		got, err := model.ParseCost(tt.s)
		if tt.err == "" && (err != nil || got != tt.want) || tt.err != "" && (err == nil || err.Error() != tt.err) {
			t.Errorf("ParseCost(%q) = %v, %v; want %v, %q", tt.s, got, err, tt.want, tt.err)
		}
		if (err == model.ErrCostNotNumber) != (tt.err == "not a number") {
			t.Errorf("ParseCost(%q): error %v, ErrCostNotNumber is %v", tt.s, err, err == model.ErrCostNotNumber)
		}
	}
}

// testPEM returns a self-signed certificate and its key, in PEM.
func testPEM(t *testing.T) (cert, key string) {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "sluice test"},
		NotBefore:             time.Unix(0, 0),
		NotAfter:              time.Unix(1<<33, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})),
		string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}))
}

func TestTLSConfig(t *testing.T) {
	cert, key := testPEM(t)
	_, otherKey := testPEM(t)
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	certFile, keyFile := file("cert.pem", cert), file("key.pem", key)
	junkFile := file("junk.pem", "not PEM")
	missing := filepath.Join(dir, "missing.pem")

	tests := []struct {
		name            string
		ca, cert, key   string
		roots, hasCerts bool
		err             string
	}{
		{name: "none"},
		{name: "ca file", ca: certFile, roots: true},
		{name: "ca PEM", ca: cert, roots: true},
		{name: "pair files", cert: certFile, key: keyFile, hasCerts: true},
		{name: "pair PEM", cert: cert, key: key, hasCerts: true},
		{name: "pair mixed", ca: cert, cert: certFile, key: key, roots: true, hasCerts: true},
		{name: "ca missing", ca: missing, err: `ca "` + missing + `": neither PEM text nor a readable file: no such file`},
		{name: "ca junk", ca: junkFile, err: `ca "` + junkFile + `": no PEM certificate found`},
		{name: "cert alone", cert: certFile, err: "cert: needs its private key (set key, or remove cert)"},
		{name: "key alone", key: keyFile, err: "key: needs its certificate (set cert, or remove key)"},
		{name: "cert missing", cert: missing, key: keyFile, err: `cert "` + missing + `": neither PEM text nor a readable file`},
		{name: "key missing", cert: certFile, key: missing, err: `key "` + missing + `": neither PEM text nor a readable file`},
		{name: "key mismatch", cert: cert, key: otherKey, err: "cert: does not go with key: "},
	}
	for _, tt := range tests {
		c, err := redisstore.TLSConfig(tt.ca, tt.cert, tt.key, false, "")
		if tt.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), tt.err) {
				t.Errorf("%s: got %v, want an error beginning %q", tt.name, err, tt.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		if c.MinVersion != tls.VersionTLS12 || c.InsecureSkipVerify || c.ServerName != "" ||
			(c.RootCAs != nil) != tt.roots || (len(c.Certificates) == 1) != tt.hasCerts {
			t.Errorf("%s: MinVersion %x, InsecureSkipVerify %v, ServerName %q, RootCAs %v, %d certificates",
				tt.name, c.MinVersion, c.InsecureSkipVerify, c.ServerName, c.RootCAs != nil, len(c.Certificates))
		}
	}

	c, err := redisstore.TLSConfig("", "", "", true, "redis.internal")
	if err != nil || !c.InsecureSkipVerify || c.ServerName != "redis.internal" {
		t.Errorf("insecure, server name: %+v, %v", c, err)
	}
}

// TestCheckBurst: a burst written in a configuration as 0 is refused in
// words that say how to get the default; any other value is
// Limit.Validate's to check.
func TestCheckBurst(t *testing.T) {
	for _, b := range []float64{0.5, 1, 100, -1, math.NaN()} {
		if err := model.CheckBurst(b); err != nil {
			t.Errorf("CheckBurst(%v): %v", b, err)
		}
	}
	err := model.CheckBurst(0)
	if fe := model.FieldOf(err); fe == nil || fe.Field != "burst" || err.Error() != `burst "0": must be positive (leave burst out for the default)` {
		t.Errorf("CheckBurst(0): %v", err)
	}
}

// TestFieldErrors checks the typed errors the hosts read: CheckLimits
// reports the second use of a name with its index, CheckFallback each of
// its rules, and FieldOf finds the FieldError in a LimitError.
func TestFieldErrors(t *testing.T) {
	a := &model.Limit{Name: "a", Rate: model.Rate{Quota: 1, Period: time.Second}}
	b := &model.Limit{Name: "b", Rate: model.Rate{Quota: 1, Period: time.Second}}
	a2 := &model.Limit{Name: "a", Rate: model.Rate{Quota: 2, Period: time.Second}}
	err := model.CheckLimits([]*model.Limit{a, b, a2})
	le, ok := err.(*model.LimitError)
	if !ok || le.Index != 2 || le.Limit != "a" || le.Err.Field != "name" || err.Error() != `limit "a": name "a": defined twice` {
		t.Errorf("CheckLimits with a name twice: %#v (%v)", err, err)
	}
	bad := &model.Limit{Name: "c", Rate: model.Rate{Quota: 1, Period: time.Second}, Burst: -1}
	if le, ok := model.CheckLimits([]*model.Limit{a, bad}).(*model.LimitError); !ok || le.Index != 1 || model.FieldOf(le).Field != "burst" {
		t.Errorf("CheckLimits with a bad burst: %#v", le)
	}
	if _, err := NewGate(GateConfig{Limits: []*model.Limit{a, a2}}); model.FieldOf(err) == nil || model.FieldOf(err).Field != "name" {
		t.Errorf("NewGate with a name twice: %v", err)
	}
	for _, c := range []struct {
		fallback bool
		n        int
		inMemory bool
		want     string
	}{
		{false, 0, true, ""},
		{true, 2, false, ""},
		{false, 2, false, "instances: only the local fallback divides quotas by the number of instances (set fallback, or remove instances)"},
		{true, 1, true, "fallback: applies only to a store that can fail, such as Redis, not to memory"},
		{true, 0, false, `instances "0": must be at least 1`},
	} {
		err := model.CheckFallback(c.fallback, c.n, c.inMemory)
		if c.want == "" && err != nil || c.want != "" && (err == nil || err.Error() != c.want || model.FieldOf(err) == nil) {
			t.Errorf("CheckFallback(%v, %d, %v) = %v, want %q", c.fallback, c.n, c.inMemory, err, c.want)
		}
	}
	if _, err := NewGate(GateConfig{Limits: []*model.Limit{a}, Fallback: &MemoryStore{}, Instances: 2}); model.FieldOf(err) == nil || model.FieldOf(err).Field != "fallback" {
		t.Errorf("NewGate with a fallback for a memory store: %v", err)
	}
	if err := a.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := a.CheckCost(2); err == nil || err.Error() != `cost "2": above the capacity of 1 (the burst, or a window algorithm's quota), so no request could ever pass; lower the cost or raise the capacity` {
		t.Errorf("CheckCost(2): %v", err)
	}
	if model.FieldOf(errors.New("x")) != nil {
		t.Error("FieldOf found a FieldError in a plain error")
	}
}
