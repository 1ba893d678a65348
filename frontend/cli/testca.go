//go:build !brood_e2e

package cli

// withTestCA is the end-to-end tests' seam for a test CA in the guest (testca_e2e.go,
// built only with the brood_e2e tag): in every other build it returns h as it is, and no
// setting, flag or variable adds a certificate authority to what an agent trusts.
func (h agentHome) withTestCA() (agentHome, error) { return h, nil }
