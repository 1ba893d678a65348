package dnsproxy

import (
	"os"
	"testing"

	"brood.dev/brood/netpolicy"
)

// TestMain switches the refusal of documentation ranges off (the test knob): these tests
// use 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24 and 2001:db8::/32 as their internet,
// inside namespaces they make or in memory.
func TestMain(m *testing.M) {
	netpolicy.AllowDocumentationRanges(true)
	os.Exit(m.Run())
}
