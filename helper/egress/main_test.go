package egress

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// TestMain runs the egress process when a Manager under test starts this binary as
// ProxySubcommand (its ProxyExe is publicTestBinary).
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == ProxySubcommand {
		os.Exit(ProxyMain(os.Args[2:]))
	}
	if len(os.Args) > 1 && os.Args[1] == confineProbe {
		os.Exit(confineProbeMain())
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
