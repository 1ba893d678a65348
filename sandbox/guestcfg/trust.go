package guestcfg

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// TrustCARequest is the SSH channel request (same rules as HomeFileRequest: on a session
// channel, before any exec or shell request) with which the host makes the guest trust
// the session's CA certificate: the certificate of the egress process's TLS terminator
// (its key never leaves that process). Its payload is a TrustCA in SSH wire encoding.
// brood-guest, as root, writes the certificate to SessionCAFile and appends it to
// SystemBundle (on the guest's tmpfs overlay; the image is not changed), then replies
// true. The agent, which runs unprivileged, can change neither file.
const TrustCARequest = "trust-ca@brood.dev"

// Paths in the guest (Debian's ca-certificates layout, update-ca-certificates(8)).
const (
	// SystemBundle is the system's CA bundle, which OpenSSL, GnuTLS (git, curl) and
	// Python's ssl module read by default.
	SystemBundle = "/etc/ssl/certs/ca-certificates.crt"
	// SessionCAFile holds the session CA certificate alone, for NODE_EXTRA_CA_CERTS.
	SessionCAFile = "/etc/ssl/certs/brood-session-ca.pem"
)

// MaxTrustCA is the largest TrustCA.PEM, in bytes.
const MaxTrustCA = 16 << 10

// TrustCA is the payload of TrustCARequest: one PEM "CERTIFICATE" block of a CA
// certificate, nothing else.
type TrustCA struct {
	PEM []byte
}

// ErrTrustCA is the error of a TrustCA the guest would refuse.
var ErrTrustCA = errors.New("invalid session CA certificate")

// Check returns an error wrapping ErrTrustCA unless t.PEM is at most MaxTrustCA bytes of
// exactly one PEM CERTIFICATE block (surrounding whitespace allowed) holding a CA
// certificate (basic constraints CA:TRUE).
func (t TrustCA) Check() error {
	if len(t.PEM) > MaxTrustCA {
		return fmt.Errorf("%w: %d bytes, more than %d", ErrTrustCA, len(t.PEM), MaxTrustCA)
	}
	block, rest := pem.Decode(t.PEM)
	if block == nil || block.Type != "CERTIFICATE" || len(block.Headers) != 0 || len(bytes.TrimSpace(rest)) != 0 {
		return fmt.Errorf("%w: not one PEM CERTIFICATE block", ErrTrustCA)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTrustCA, err)
	}
	if !cert.BasicConstraintsValid || !cert.IsCA {
		return fmt.Errorf("%w: not a CA certificate", ErrTrustCA)
	}
	return nil
}

// TrustEnv returns the variables that point the agent's TLS stacks at the session CA
// besides the system bundle: OpenSSL (SSL_CERT_FILE), Python requests
// (REQUESTS_CA_BUNDLE), curl (CURL_CA_BUNDLE), git (GIT_SSL_CAINFO) at SystemBundle, and
// Node.js, whose built-in roots ignore the system bundle, at SessionCAFile
// (NODE_EXTRA_CA_CERTS adds to them).
func TrustEnv() [][2]string {
	return [][2]string{
		{"CURL_CA_BUNDLE", SystemBundle},
		{"GIT_SSL_CAINFO", SystemBundle},
		{"NODE_EXTRA_CA_CERTS", SessionCAFile},
		{"REQUESTS_CA_BUNDLE", SystemBundle},
		{"SSL_CERT_FILE", SystemBundle},
	}
}
