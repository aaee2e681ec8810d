package upstreamtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"
)

// newServerTLS makes a self-signed certificate for 127.0.0.1, ::1 and
// localhost, valid for a day.
func newServerTLS(t testing.TB) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatalf("upstreamtest: key: %v", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "upstreamtest"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatalf("upstreamtest: certificate: %v", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatalf("upstreamtest: certificate: %v", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}}}
}

// ClientTLS returns a client config trusting this fake's certificate (nil
// when the fake is not TLS). Pass it as upstream.DialConfig.TLS.
func (s *Server) ClientTLS() *tls.Config {
	if s.serverTLS == nil {
		return nil
	}
	pool := x509.NewCertPool()
	pool.AddCert(s.serverTLS.Certificates[0].Leaf)
	return &tls.Config{RootCAs: pool}
}

// CertPEM returns this fake's certificate (its own CA) PEM-encoded, for a
// CA file (nil when the fake is not TLS).
func (s *Server) CertPEM() []byte {
	if s.serverTLS == nil {
		return nil
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: s.serverTLS.Certificates[0].Leaf.Raw})
}
