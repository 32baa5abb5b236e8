package redisstore

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"strings"

	"github.com/sluicehq/sluice/core/model"
)

// TLSConfig returns the configuration of a TLS client, such as a store's
// connection to Redis: TLS 1.2 or later, verifying the server's
// certificate against the authorities in ca (empty: the system's roots)
// under serverName (empty: the host dialed), or accepting any certificate
// when insecureSkipVerify is set; and presenting the client certificate
// cert with its private key key, when set, both or neither.
//
// ca, cert and key are each either PEM text itself, recognized by its
// "-----BEGIN" line, or the name of a file holding it. Errors begin with
// *FieldError of the field at fault: "ca", "cert" or "key".
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
			return nil, model.Refuse("ca", ca, "no PEM certificate found")
		}
	}
	if err := CheckTLSPair(cert, key); err != nil {
		return nil, err
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
			return nil, model.Refuse("cert", "", "does not go with key: "+err.Error())
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// CheckTLSPair checks that a client certificate and its private key
// come together, both or neither. Its error is a *FieldError of the field
// set alone.
func CheckTLSPair(cert, key string) error {
	switch {
	case cert != "" && key == "":
		return &model.FieldError{Field: "cert", Reason: "needs its private key", Needs: "key"}
	case key != "" && cert == "":
		return &model.FieldError{Field: "key", Reason: "needs its certificate", Needs: "cert"}
	}
	return nil
}

// readPEM returns s itself when it is PEM text, else the contents of the
// file s names; field names s in the error.
func readPEM(field, s string) ([]byte, error) {
	if strings.Contains(s, "-----BEGIN") {
		return []byte(s), nil
	}
	b, err := os.ReadFile(s)
	if err != nil {
		if pe, ok := err.(*os.PathError); ok {
			err = pe.Err // without the file's name, the Value
		}
		return nil, model.Refuse(field, s, "neither PEM text nor a readable file: "+err.Error())
	}
	return b, nil
}
