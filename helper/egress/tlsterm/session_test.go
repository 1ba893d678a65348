package tlsterm

import (
	"crypto/x509"
	"encoding/pem"
	"testing"

	"brood.dev/brood/helper/api"
)

// TestNewSession: the CA covers every bound host and the inspected names, nothing else;
// its certificate is what the guest gets; bindings without hosts and no inspected name
// is an error.
func TestNewSession(t *testing.T) {
	term, certPEM, err := NewSession(testSecrets(), []string{"*.inspect.test"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{provider: true, other: true, authHost: true, "a.inspect.test": true, "evil.test": false} {
		if term.Covers(name) != want {
			t.Errorf("Covers(%s) = %v", name, !want)
		}
	}
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil || !cert.IsCA || len(cert.PermittedDNSDomains) != 4 {
		t.Fatalf("CA certificate %v: %v", err, cert.PermittedDNSDomains)
	}
	none := api.SessionSecrets{Bindings: []api.SecretBinding{{Name: "x", Placeholder: nowherePH, Value: nowhereReal}}}
	if _, _, err := NewSession(none, nil, nil, nil); err == nil {
		t.Fatal("a session with nothing to terminate was made")
	}
}
