package guest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/sandbox/guestcfg"
)

func testCert(t *testing.T, isCA bool) []byte {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "t"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true, IsCA: isCA}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestInstallTrustCA: the CA lands in its own file and once at the end of the system
// bundle, the bundle's earlier content kept; symlinks at the targets are replaced, not
// followed.
func TestInstallTrustCA(t *testing.T) {
	root := t.TempDir()
	certs := filepath.Join(root, "etc/ssl/certs")
	os.MkdirAll(certs, 0o755)
	system := testCert(t, true)
	os.WriteFile(filepath.Join(certs, "ca-certificates.crt"), system, 0o644)
	outside := filepath.Join(t.TempDir(), "victim")
	os.WriteFile(outside, []byte("keep"), 0o644)
	os.Symlink(outside, filepath.Join(certs, "brood-session-ca.pem"))
	ca := testCert(t, true)
	for range 2 {
		if err := installTrustCA(root, guestcfg.TrustCA{PEM: ca}); err != nil {
			t.Fatal(err)
		}
	}
	bundle, _ := os.ReadFile(filepath.Join(root, guestcfg.SystemBundle))
	if !strings.HasPrefix(string(bundle), string(system)) || strings.Count(string(bundle), string(ca)) != 1 {
		t.Fatalf("bundle:\n%s", bundle)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatal("the bundle does not parse")
	}
	own, _ := os.ReadFile(filepath.Join(root, guestcfg.SessionCAFile))
	if string(own) != string(ca) {
		t.Fatalf("session CA file: %q", own)
	}
	if v, _ := os.ReadFile(outside); string(v) != "keep" {
		t.Fatal("the write followed a symlink")
	}
	if fi, _ := os.Lstat(filepath.Join(root, guestcfg.SessionCAFile)); fi.Mode().Perm() != 0o644 || !fi.Mode().IsRegular() {
		t.Fatalf("mode %v", fi.Mode())
	}
}

func TestTrustCACheck(t *testing.T) {
	ca := testCert(t, true)
	for name, data := range map[string][]byte{
		"not a CA":   testCert(t, false),
		"two blocks": append(append([]byte{}, ca...), ca...),
		"junk after": append(append([]byte{}, ca...), "junk"...),
		"not PEM":    []byte("hello"),
		"too large":  append(append([]byte{}, ca...), make([]byte, guestcfg.MaxTrustCA)...),
	} {
		if err := installTrustCA(t.TempDir(), guestcfg.TrustCA{PEM: data}); !errors.Is(err, guestcfg.ErrTrustCA) {
			t.Errorf("%s: %v, want ErrTrustCA", name, err)
		}
	}
}

// TestInstallTrustCANoStore: an image without a CA store gets one holding the session CA.
func TestInstallTrustCANoStore(t *testing.T) {
	root := t.TempDir()
	ca := testCert(t, true)
	if err := installTrustCA(root, guestcfg.TrustCA{PEM: ca}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, guestcfg.SystemBundle)); string(b) != string(ca) {
		t.Fatalf("bundle %q", b)
	}
}
