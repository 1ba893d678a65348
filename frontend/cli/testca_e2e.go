//go:build brood_e2e

package cli

import (
	"fmt"
	"os"

	"brood.dev/brood/sandbox/guestcfg"
)

// testCAEnv names the host file (PEM) of the end-to-end tests' certificate authority.
const testCAEnv = "BROOD_E2E_GUEST_CA"

// testCAPath is where the CA lands in the guest: brood-guest's agent home is /home/agent.
const testCAPath = "/home/agent/.brood-e2e-ca.pem"

// withTestCA, in a brood built with the brood_e2e tag (the end-to-end tests build it so;
// release builds never do), adds the PEM file $BROOD_E2E_GUEST_CA to the agent's home and
// points Node's CA setting at it: NODE_EXTRA_CA_CERTS (Node and Bun: gemini, Claude
// Code, opencode). The agents then reach the tests' fake providers by their real names.
func (h agentHome) withTestCA() (agentHome, error) {
	p := os.Getenv(testCAEnv)
	if p == "" {
		return h, nil
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return h, fmt.Errorf("read the test CA $%s: %w", testCAEnv, err)
	}
	h.files = append(h.files, guestcfg.HomeFile{Path: ".brood-e2e-ca.pem", Mode: 0o644, Data: data})
	// NODE_EXTRA_CA_CERTS is replaced by the session CA's file when the helper terminates
	// TLS for the provider (the guest then never sees the test CA's certificates).
	// CODEX_CA_CERTIFICATE is not set: it would replace codex's roots, session CA
	// included; codex reads SSL_CERT_FILE, which then names the bundle with the session CA.
	h.env = append(h.env, [2]string{"NODE_EXTRA_CA_CERTS", testCAPath})
	h.notes = append(h.notes, "test build: the agent trusts the test CA "+p)
	return h, nil
}
