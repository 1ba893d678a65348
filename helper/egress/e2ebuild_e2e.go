//go:build brood_e2e

package egress

// e2eBuild: this broodd-helper was built with the brood_e2e tag for the end-to-end tests
// (e2ebuild.go).
const e2eBuild = true
