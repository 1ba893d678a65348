package helper

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// vmmDir is the directory under the runtime dir holding the execute-only VMM copy.
const vmmDir = "vmm"

// ExecOnlyCopy copies the VMM binary src (<prefix>/bin/NAME) to dir/bin/NAME with mode
// 0711 and returns the copy's path. Why: exec resets a process's dumpable flag, so QEMU
// would be ptrace-able by the user it runs as (and its /dev/kvm descriptor theirs to
// use) even though its runner is not; but the kernel keeps a process non-dumpable when
// it execs a file it cannot read (fs/exec.c, would_dump → BINPRM_FLAGS_ENFORCE_NONDUMP,
// with fs.suid_dumpable = 0). ELF binaries run without read permission.
//
// QEMU finds its modules and firmware relative to its executable (a relocatable build:
// ../lib/<triplet>/qemu, ../share/qemu), so dir gets symlinks lib, libexec and share to
// <prefix>'s (dir is created root-owned 0755, everything in it is replaced).
func ExecOnlyCopy(src, dir string) (string, error) {
	bin := filepath.Dir(src)
	if filepath.Base(bin) != "bin" {
		return "", fmt.Errorf("copy VMM %s: not in a <prefix>/bin directory", src)
	}
	prefix := filepath.Dir(bin)
	if err := EnsureDir(dir); err != nil {
		return "", err
	}
	if err := EnsureDir(filepath.Join(dir, "bin")); err != nil {
		return "", err
	}
	for _, d := range []string{"lib", "libexec", "share"} {
		link := filepath.Join(dir, d)
		os.Remove(link)
		if err := os.Symlink(filepath.Join(prefix, d), link); err != nil {
			return "", fmt.Errorf("copy VMM: %w", err)
		}
	}
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("copy VMM: %w", err)
	}
	defer in.Close()
	dst := filepath.Join(dir, "bin", filepath.Base(src))
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-vmm-")
	if err != nil {
		return "", fmt.Errorf("copy VMM: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return "", fmt.Errorf("copy VMM %s: %w", src, err)
	}
	if err := tmp.Chmod(0o711); err != nil {
		tmp.Close()
		return "", fmt.Errorf("copy VMM: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("copy VMM: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("copy VMM: %w", err)
	}
	return dst, nil
}
