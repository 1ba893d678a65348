package sshclient

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"brood.dev/brood/sandbox/guestcfg"
)

// TestPutTrustCA: the CA arrives whole; something that is not one CA certificate is not
// sent.
func TestPutTrustCA(t *testing.T) {
	var g *fakeGuest
	c, err := connect(t, func(fg *fakeGuest) ssh.PublicKey { g = fg; return fg.hostSigner.PublicKey() })
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ca"}, NotBefore: time.Now(),
		NotAfter: time.Now().Add(time.Hour), BasicConstraintsValid: true, IsCA: true}
	der, _ := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := PutTrustCA(context.Background(), c, ca); err != nil {
		t.Fatal(err)
	}
	if got := <-g.trusted; !bytes.Equal(got, ca) {
		t.Fatal("the guest got another certificate")
	}
	if err := PutTrustCA(context.Background(), c, []byte("not a certificate")); !errors.Is(err, guestcfg.ErrTrustCA) {
		t.Fatalf("bad PEM: %v", err)
	}
	select {
	case <-g.trusted:
		t.Fatal("a bad certificate was sent")
	default:
	}
}
