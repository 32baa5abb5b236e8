package core

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
)

// This file holds the checks of configuration values that every host of
// the engine reads the same way, so that the Caddy module and the Traefik
// plugin accept the same values and describe a mistake in the same words.
// Errors begin with the name of the field at fault; callers prefix the
// option's path in their own configuration syntax.

// LimitNameReserved lists the bytes a Limit's Name must not contain: the
// double quote, backslash, colon, braces, carriage return and line feed.
// Names appear quoted in RateLimit-Policy headers and inside store keys,
// where these bytes delimit.
const LimitNameReserved = "\"\\:{}\r\n"

// CheckLimitName returns an error, beginning with "name", if name is
// empty or contains a byte of LimitNameReserved, and nil otherwise.
func CheckLimitName(name string) error {
	if name == "" {
		return errors.New("name: must not be empty")
	}
	if strings.ContainsAny(name, LimitNameReserved) {
		return fmt.Errorf("name %q: must not contain quotes, backslashes, colons, braces or line breaks", name)
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			// A structured-field String carries printable ASCII only, and
			// the name must read the same in the header and the body.
			return fmt.Errorf("name %q: must be printable ASCII (it is sent in the RateLimit-Policy header)", name)
		}
	}
	return nil
}

// CheckBurst returns an error, beginning with "burst", unless burst, a
// value written in a host's configuration, is positive. A Limit reads a
// zero Burst as unset, and each host fills an unset burst with its own
// default (the Caddy module: the quota; the Traefik plugin: 1, as Traefik's
// rateLimit), so a burst written as 0 would mean the quota in one host and
// 1 in the other: every host refuses it instead, in these words.
func CheckBurst(burst float64) error {
	if !(burst > 0) {
		return fmt.Errorf("burst: must be positive, got %v (leave burst out for the default)", burst)
	}
	return nil
}

// ErrCostNotNumber is ParseCost's error for a value that is not a finite
// number, infinities and NaN included.
var ErrCostNotNumber = errors.New("not a number")

// ParseCost parses a request's cost: a positive finite number in the
// syntax of strconv.ParseFloat ("3", "0.5", "1e3"), without surrounding
// spaces. Its error, ErrCostNotNumber or "must be positive", does not
// repeat s: callers name the option and the value.
func ParseCost(s string) (float64, error) {
	c, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(c, 0) || math.IsNaN(c) {
		return 0, ErrCostNotNumber
	}
	if c <= 0 {
		return 0, errors.New("must be positive")
	}
	return c, nil
}

// TLSConfig returns the configuration of a TLS client, such as a store's
// connection to Redis: TLS 1.2 or later, verifying the server's
// certificate against the authorities in ca (empty: the system's roots)
// under serverName (empty: the host dialed), or accepting any certificate
// when insecureSkipVerify is set; and presenting the client certificate
// cert with its private key key, when set, both or neither.
//
// ca, cert and key are each either PEM text itself, recognized by its
// "-----BEGIN" line, or the name of a file holding it. Errors begin with
// the field at fault: "ca: ", "cert: ", "key: " or "cert, key: ".
func TLSConfig(ca, cert, key string, insecureSkipVerify bool, serverName string) (*tls.Config, error) {
	cfg := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         serverName,
		InsecureSkipVerify: insecureSkipVerify, //nolint:gosec // an explicit, documented opt-in
	}
	if ca != "" {
		pem, err := readPEM("ca", ca)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = x509.NewCertPool()
		if !cfg.RootCAs.AppendCertsFromPEM(pem) {
			return nil, errors.New("ca: no PEM certificate found")
		}
	}
	if (cert == "") != (key == "") {
		return nil, errors.New("cert, key: set both or neither")
	}
	if cert != "" {
		certPEM, err := readPEM("cert", cert)
		if err != nil {
			return nil, err
		}
		keyPEM, err := readPEM("key", key)
		if err != nil {
			return nil, err
		}
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("cert, key: %w", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// readPEM returns s itself when it is PEM text, else the contents of the
// file s names; field names s in the error.
func readPEM(field, s string) ([]byte, error) {
	if strings.Contains(s, "-----BEGIN") {
		return []byte(s), nil
	}
	b, err := os.ReadFile(s)
	if err != nil {
		return nil, fmt.Errorf("%s: neither PEM text nor a readable file: %w", field, err)
	}
	return b, nil
}
