//go:build !linux

package vmhost

import (
	"errors"
	"fmt"
	"runtime"
)

// ErrForeignTree marks a run directory that holds another uid's directory.
var ErrForeignTree = errors.New("run directory holds another user's directory")

// removeRunDir is unavailable off Linux (VMs run only on Linux).
func removeRunDir(dir string) error {
	return fmt.Errorf("remove run dir %s on %s: %w", dir, runtime.GOOS, errors.ErrUnsupported)
}

func removeRunDirAt(int, string) error { return errors.ErrUnsupported }
