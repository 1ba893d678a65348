package testenv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"
)

// TestCA returns a server certificate for names (DNS names), signed by a fresh test CA,
// and a pool holding only that CA: a client that trusts the pool completes a real TLS
// handshake with a server that presents the certificate, for those names only. Keys are
// ECDSA P-256, valid for one hour.
func TestCA(t testing.TB, names ...string) (tls.Certificate, *x509.CertPool) {
	t.Helper()
	cert, pool, _ := TestCAPEM(t, names...)
	return cert, pool
}

// TestCAPEM is TestCA that also returns the test CA's certificate, PEM.
func TestCAPEM(t testing.TB, names ...string) (tls.Certificate, *x509.CertPool, []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "brood test CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool, caPEM
}

// CAPEM returns the certificate of a fresh test CA, PEM (TestCAPEM's, its server
// certificate for ca.test unused): for a test that needs a CA certificate and no handshake.
func CAPEM(t testing.TB) string {
	t.Helper()
	_, _, pem := TestCAPEM(t, "ca.test")
	return string(pem)
}
