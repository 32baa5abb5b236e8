package redistest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// certFiles are the PEM files of a server's TLS setup.
type certFiles struct {
	ca, cert, key string
}

// writeCerts generates an ECDSA P-256 CA and a server certificate it signs
// for 127.0.0.1 and localhost, valid from an hour ago for a day, writes
// them to dir and returns the file names and a pool holding the CA.
func writeCerts(dir string) (certFiles, *x509.CertPool, error) {
	var files certFiles
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return files, nil, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "redistest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return files, nil, err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return files, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return files, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost"},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return files, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return files, nil, err
	}
	files = certFiles{
		ca:   filepath.Join(dir, "ca.pem"),
		cert: filepath.Join(dir, "cert.pem"),
		key:  filepath.Join(dir, "key.pem"),
	}
	if err := writePEM(files.ca, "CERTIFICATE", caDER); err != nil {
		return files, nil, err
	}
	if err := writePEM(files.cert, "CERTIFICATE", der); err != nil {
		return files, nil, err
	}
	if err := writePEM(files.key, "PRIVATE KEY", keyDER); err != nil {
		return files, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return files, pool, nil
}

// writePEM writes one PEM block of type typ to the file name.
func writePEM(name, typ string, der []byte) error {
	return os.WriteFile(name, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
