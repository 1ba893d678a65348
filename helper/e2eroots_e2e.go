//go:build brood_e2e

package helper

import "os"

// upstreamCAEnv names the PEM file of the end-to-end tests' certificate authority, which
// signs the fake providers' certificates.
const upstreamCAEnv = "BROOD_E2E_UPSTREAM_CA"

// readTestBuildEnv, in a broodd-helper built with the brood_e2e tag (the end-to-end tests
// build it so; release builds never do), reads $BROOD_E2E_UPSTREAM_CA before the
// environment is scrubbed: the egress processes then verify the real hosts of terminated
// connections against that CA instead of the host's trust store.
func readTestBuildEnv() {
	if p := os.Getenv(upstreamCAEnv); p != "" {
		if b, err := os.ReadFile(p); err == nil {
			testSecretRoots = b
		}
	}
}
