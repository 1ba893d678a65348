package egress

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

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

var (
	publicBinOnce sync.Once
	publicBin     string
	publicBinErr  error
)

// publicTestBinary copies the test binary where the session's uid can execute it (the go
// test build directory is private to root) and returns its path.
func publicTestBinary(t *testing.T) string {
	t.Helper()
	publicBinOnce.Do(func() {
		data, err := os.ReadFile(os.Args[0])
		if err != nil {
			publicBinErr = err
			return
		}
		dir, err := os.MkdirTemp("", "brood-egress-bin-")
		if err != nil {
			publicBinErr = err
			return
		}
		os.Chmod(dir, 0o755)
		publicBin = filepath.Join(dir, "egress.test")
		publicBinErr = os.WriteFile(publicBin, data, 0o755)
	})
	if publicBinErr != nil {
		t.Fatal(publicBinErr)
	}
	return publicBin
}
