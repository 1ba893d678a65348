package frontend

import (
	"testing"

	"brood.dev/brood/sandbox/guestcfg"
)

// TestWithTrustEnv: the CA variables replace the spec's of the same name, the others stay.
func TestWithTrustEnv(t *testing.T) {
	got := withTrustEnv([][2]string{{"A", "1"}, {"SSL_CERT_FILE", "/elsewhere"}})
	if got[0] != [2]string{"A", "1"} || len(got) != 1+len(guestcfg.TrustEnv()) {
		t.Fatalf("env %v", got)
	}
	for _, kv := range got {
		if kv[0] == "SSL_CERT_FILE" && kv[1] != guestcfg.SystemBundle {
			t.Fatalf("SSL_CERT_FILE = %q", kv[1])
		}
	}
}
