package testenv

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// CopyTestBinary copies the running test binary into dir under its own name (e.g.
// "helper.test"), mode 0755, and returns the copy's path: go test builds the binary in a
// directory only its user can enter, and a test's child running as another uid needs
// one it can execute.
func CopyTestBinary(t testing.TB, dir string) string {
	t.Helper()
	p, err := copyTestBinary(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func copyTestBinary(dir string) (string, error) {
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("copy the test binary: %w", err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		return "", fmt.Errorf("copy the test binary: %w", err)
	}
	p := filepath.Join(dir, filepath.Base(self))
	if err := os.WriteFile(p, data, 0o755); err != nil {
		return "", fmt.Errorf("copy the test binary: %w", err)
	}
	return p, nil
}

var publicBin struct {
	once sync.Once
	path string
	err  error
}

// PublicTestBinary is CopyTestBinary into a new directory of mode 0755 under the system
// temp dir, made once per test process; every call returns the same path. It is left
// for the caller to remove (filepath.Dir of the path) when nothing runs it any more.
func PublicTestBinary(t testing.TB) string {
	t.Helper()
	publicBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "brood-test-bin-")
		if err == nil {
			err = os.Chmod(dir, 0o755)
		}
		if err != nil {
			publicBin.err = fmt.Errorf("public test binary dir: %w", err)
			return
		}
		publicBin.path, publicBin.err = copyTestBinary(dir)
	})
	if publicBin.err != nil {
		t.Fatal(publicBin.err)
	}
	return publicBin.path
}
