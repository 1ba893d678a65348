package tlsterm

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"sync"
	"time"
)

// CAValidity is how long a session CA (and every leaf it mints) is valid, from one hour
// before it is made: longer than any session, short enough that a leaked certificate
// soon stops mattering.
const CAValidity = 8 * 24 * time.Hour

// maxLeaves is the largest number of leaf certificates kept; past it, leaves are minted
// per connection and not cached.
const maxLeaves = 256

// CA is one session's certificate authority: an ECDSA P-256 key made in memory, never
// exported, and a self-signed certificate whose name constraints (RFC 5280 section
// 4.2.1.10, critical) permit only the names it was made for.
type CA struct {
	cert  *x509.Certificate
	key   *ecdsa.PrivateKey
	pem   []byte
	names []string

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// NewCA makes a CA for names (exact DNS names, or "*.suffix" for every name under
// suffix; at least one), valid from now-1h for CAValidity.
func NewCA(names []string, now time.Time) (*CA, error) {
	if len(names) == 0 {
		return nil, errors.New("make session CA: no names")
	}
	var permitted []string
	for _, n := range names {
		n = normalizeHost(n)
		if suf, ok := strings.CutPrefix(n, "*."); ok {
			permitted = append(permitted, "."+suf)
		} else {
			permitted = append(permitted, n)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("make session CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:                serial(),
		Subject:                     pkix.Name{CommonName: "brood session CA", Organization: []string{"brood"}},
		NotBefore:                   now.Add(-time.Hour),
		NotAfter:                    now.Add(CAValidity),
		KeyUsage:                    x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid:       true,
		IsCA:                        true,
		MaxPathLenZero:              true,
		PermittedDNSDomainsCritical: true,
		PermittedDNSDomains:         permitted,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("make session CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse session CA certificate: %w", err)
	}
	return &CA{
		cert: cert, key: key, names: names,
		pem:    pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		leaves: map[string]*tls.Certificate{},
	}, nil
}

// CertPEM returns the CA certificate, PEM-encoded: what the guest trusts.
func (c *CA) CertPEM() []byte { return append([]byte(nil), c.pem...) }

// Certificate returns the parsed CA certificate.
func (c *CA) Certificate() *x509.Certificate { return c.cert }

// Covers reports whether name is one of the CA's names or under one of its suffixes.
func (c *CA) Covers(name string) bool {
	name = normalizeHost(name)
	for _, n := range c.names {
		n = normalizeHost(n)
		if suf, ok := strings.CutPrefix(n, "*."); ok {
			if strings.HasSuffix(name, "."+suf) {
				return true
			}
		} else if n == name {
			return true
		}
	}
	return false
}

// Leaf returns the certificate for name (a DNS name the CA covers), minting and caching
// it on first use. It returns ErrName for a name the CA does not cover.
func (c *CA) Leaf(name string) (*tls.Certificate, error) {
	name = normalizeHost(name)
	if !c.Covers(name) {
		return nil, fmt.Errorf("mint certificate for %q: %w", name, ErrName)
	}
	c.mu.Lock()
	leaf, ok := c.leaves[name]
	c.mu.Unlock()
	if ok {
		return leaf, nil
	}
	leaf, err := c.mint(name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if len(c.leaves) < maxLeaves {
		c.leaves[name] = leaf
	}
	c.mu.Unlock()
	return leaf, nil
}

func (c *CA) mint(name string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mint certificate for %q: %w", name, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name},
		DNSNames:     []string{name},
		NotBefore:    c.cert.NotBefore,
		NotAfter:     c.cert.NotAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, fmt.Errorf("mint certificate for %q: %w", name, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse certificate for %q: %w", name, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// serial returns a random 128-bit serial number (RFC 5280 section 4.1.2.2: positive, at
// most 20 bytes).
func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return n.Add(n, big.NewInt(1))
}

// normalizeHost lower-cases a DNS name and drops a trailing dot.
func normalizeHost(h string) string { return strings.TrimSuffix(strings.ToLower(h), ".") }
