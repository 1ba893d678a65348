package egress

import (
	"os"
	"testing"

	"brood.dev/brood/internal/testenv"
	"brood.dev/brood/netpolicy"
)

// TestMain switches the refusal of documentation ranges off (the test knob): these tests
// use 192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24 and 2001:db8::/32 as their internet,
// inside namespaces they make or in memory. It runs the egress process when a Manager
// under test starts this binary as ProxySubcommand (its ProxyExe is publicTestBinary);
// TestMain sets the knob for the process too.
func TestMain(m *testing.M) {
	netpolicy.AllowDocumentationRanges(true)
	AcceptTestRoots() // the fake bound hosts' CA (TestSecretsNetns)
	if len(os.Args) > 1 && os.Args[1] == ProxySubcommand {
		os.Exit(ProxyMain(os.Args[2:]))
	}
	if len(os.Args) > 2 && os.Args[1] == trustProbe {
		os.Exit(trustProbeMain(os.Args[2] == "warm"))
	}
	if len(os.Args) > 1 && os.Args[1] == confineProbe {
		os.Exit(confineProbeMain())
	}
	if code, ok := testChild(); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// publicTestBinary is testenv.PublicTestBinary: a copy of this test binary that the
// session's uid can execute.
func publicTestBinary(t *testing.T) string {
	t.Helper()
	return testenv.PublicTestBinary(t)
}
