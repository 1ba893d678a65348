//go:build brood_e2e

package netpolicy

// In a build with the brood_e2e tag (the agent end-to-end tests build brood and
// broodd-helper so; release builds never do) the documentation ranges are not refused,
// as AllowDocumentationRanges(true) would do in a test binary: those tests' fake internet
// lives on them, inside network namespaces the tests make.
func init() { allowDocumentation.Store(true) }
