package helper

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// EnsureDir creates dir (mode 0755) if missing and then checks it with lstat: a real
// directory (not a symlink), owned by this process's uid, not writable by group or others.
// Any other state fails with ErrUnsafeDir and the helper refuses to start; it never
// repairs or follows what it finds.
func EnsureDir(dir string) error {
	fi, err := os.Lstat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return fmt.Errorf("create directory %q: %w", dir, err)
		}
		// Mkdir honours the umask; set the mode exactly.
		if err := os.Chmod(dir, 0o755); err != nil {
			return fmt.Errorf("chmod directory %q: %w", dir, err)
		}
		fi, err = os.Lstat(dir)
	}
	if err != nil {
		return fmt.Errorf("lstat directory %q: %w", dir, err)
	}
	return checkDir(dir, fi, uint32(os.Geteuid()))
}

// checkDir is EnsureDir's check of an existing directory against the expected owner uid.
func checkDir(dir string, fi fs.FileInfo, uid uint32) error {
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("directory %q is a symlink: %w", dir, ErrUnsafeDir)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%q is not a directory (%v): %w", dir, fi.Mode().Type(), ErrUnsafeDir)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("directory %q: no owner information: %w", dir, ErrUnsafeDir)
	}
	if st.Uid != uid {
		return fmt.Errorf("directory %q is owned by uid %d, want %d: %w", dir, st.Uid, uid, ErrUnsafeDir)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("directory %q has mode %v (writable by group or others): %w", dir, fi.Mode().Perm(), ErrUnsafeDir)
	}
	return nil
}
