//go:build !brood_e2e

package egress

// e2eBuild is true only in a broodd-helper built with the brood_e2e tag (the end-to-end
// tests build it so; release builds never do): its egress processes then take
// procSecrets.TestRoots, the fake providers' CA, as AcceptTestRoots lets test binaries.
const e2eBuild = false
