package helper

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// vmmDir is the directory under the runtime dir holding the execute-only VMM copy.
const vmmDir = "vmm"

// selfDir is the directory under the runtime dir holding the execute-only copy of
// broodd-helper itself (SelfCopy).
const selfDir = "self"

// execOnlyMode is the mode of an execute-only copy: root (its owner) may read it, every
// other user may only execute it.
const execOnlyMode = 0o711

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
	dst := filepath.Join(dir, "bin", filepath.Base(src))
	return dst, copyExecOnly(src, dst)
}

// SelfCopyPath is where SelfCopy puts the copy of the helper executable exe:
// <runtimeDir>/self/<base name of exe> (the base name is kept: --cleanup recognises
// runners by it when their exe link is unreadable).
func SelfCopyPath(runtimeDir, exe string) string {
	return filepath.Join(runtimeDir, selfDir, filepath.Base(exe))
}

// SelfCopy copies this process's executable to SelfCopyPath with mode 0711 (root-owned:
// the helper runs as root) and returns the copy's path. The spawner, the VM runners and
// the egress processes are executed from it: a process that execs a file its user cannot
// read is non-dumpable from the execve on (fs/exec.c: would_dump sets
// BINPRM_FLAGS_ENFORCE_NONDUMP, then begin_new_exec sets the dumpable flag to
// fs.suid_dumpable instead of SUID_DUMP_USER), so the session owner cannot ptrace a runner
// or open its /proc/<pid>/fd in the moment between its execve and its own
// prctl(PR_SET_DUMPABLE, 0). A readable binary would leave that window open.
func SelfCopy(runtimeDir string) (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("copy own executable: %w", err)
	}
	if err := EnsureDir(filepath.Join(runtimeDir, selfDir)); err != nil {
		return "", err
	}
	dst := SelfCopyPath(runtimeDir, exe)
	return dst, copyExecOnly(exe, dst)
}

// copyExecOnly copies the regular file src to dst (replacing it atomically, by rename)
// with execOnlyMode.
func copyExecOnly(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s execute-only: %w", src, err)
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-exec-")
	if err != nil {
		return fmt.Errorf("copy %s execute-only: %w", src, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := io.Copy(tmp, in); err != nil {
		tmp.Close()
		return fmt.Errorf("copy %s execute-only: %w", src, err)
	}
	if err := tmp.Chmod(execOnlyMode); err != nil {
		tmp.Close()
		return fmt.Errorf("copy %s execute-only: %w", src, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("copy %s execute-only: %w", src, err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("copy %s execute-only: %w", src, err)
	}
	return nil
}
