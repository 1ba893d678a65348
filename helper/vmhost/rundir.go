package vmhost

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"brood.dev/brood/helper/runner"
	"brood.dev/brood/sandbox/guestcfg"
	"brood.dev/brood/sandbox/initramfs"
	"golang.org/x/sys/unix"
)

// RunParent is the directory under the daemon's runtime dir holding per-session run dirs.
const RunParent = "vm"

// makeRunDir creates parent/<id> (mode 0700, root until the caller hands it to the owner)
// and returns its path and an open descriptor. parent is <runtime dir>/RunParent, which
// the caller has created and checked.
func makeRunDir(parent, id string) (string, *os.File, error) {
	dir := filepath.Join(parent, id)
	if err := removeRunDir(dir); err != nil { // a leftover of a previous helper
		return "", nil, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return "", nil, fmt.Errorf("create run dir: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		return "", nil, &os.PathError{Op: "open run dir", Path: dir, Err: err}
	}
	return dir, os.NewFile(uintptr(fd), dir), nil
}

// writeSessionInitrd writes the session initramfs (base + the guest config archive) into
// the run directory as root, hands it to the owner read-only (QEMU reopens it through
// /proc/self/fd, which checks the inode's permissions) and returns it opened.
func writeSessionInitrd(base, dirf *os.File, runDir string, gcfg guestcfg.Config, uid, gid uint32) (*os.File, error) {
	files, err := initramfs.SessionFiles(gcfg)
	if err != nil {
		return nil, err
	}
	out := filepath.Join(runDir, "initrd")
	if err := initramfs.WithSession("/proc/self/fd/"+strconv.Itoa(int(base.Fd())), out, files); err != nil {
		return nil, err
	}
	fd, err := unix.Openat(int(dirf.Fd()), "initrd", unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: out, Err: err}
	}
	f := os.NewFile(uintptr(fd), out)
	// chmod while root still owns the file: the unit grants no CAP_FOWNER, so root cannot
	// change the mode of a file it has handed to the user.
	if err := unix.Fchmod(fd, 0o400); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "chmod", Path: out, Err: err}
	}
	if err := unix.Fchown(fd, int(uid), int(gid)); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "chown", Path: out, Err: err}
	}
	return f, nil
}

// socketpair returns the two ends of a Unix stream socketpair: the helper's as a
// *net.UnixConn, the runner's as an *os.File to pass with ExtraFiles.
func socketpair() (*net.UnixConn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	hf := os.NewFile(uintptr(fds[0]), "runner-control")
	defer hf.Close()
	nc, err := net.FileConn(hf)
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("runner control socket: %w", err)
	}
	return nc.(*net.UnixConn), os.NewFile(uintptr(fds[1]), "runner-control"), nil
}

// checkStreamSocket requires f to be a connected Unix stream socket.
func checkStreamSocket(f *os.File) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return os.NewSyscallError("fstat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return fmt.Errorf("runner returned a non-socket descriptor (mode %#o): %w", st.Mode, runner.ErrRunner)
	}
	typ, err := unix.GetsockoptInt(int(f.Fd()), unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil || typ != unix.SOCK_STREAM {
		return fmt.Errorf("runner returned a socket of type %d: %w", typ, runner.ErrRunner)
	}
	return nil
}

// CleanupRunDirs removes every per-session run directory under <runtimeDir>/vm (left by
// a crashed helper: at startup no session exists), each as its owner (removeRunDirAt),
// and returns the names of those it removed. A run dir that could not be removed (one
// that holds another uid's tree stays, with that tree intact: ErrForeignTree) is
// reported in left, joined, and never in err: a user's run dir must not stop the helper
// from starting. err is the failure to open or list <runtimeDir>/vm; a missing one is
// not an error.
func CleanupRunDirs(runtimeDir string) (removed []string, left, err error) {
	parent := filepath.Join(runtimeDir, RunParent)
	pfd, err := unix.Open(parent, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, &os.PathError{Op: "open run dirs", Path: parent, Err: err}
	}
	f := os.NewFile(uintptr(pfd), parent)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, nil, fmt.Errorf("list run dirs %s: %w", parent, err)
	}
	var errs []error
	for _, n := range names {
		if err := removeRunDirAt(pfd, n); err != nil {
			errs = append(errs, fmt.Errorf("remove run dir %s: %w", filepath.Join(parent, n), err))
			continue
		}
		removed = append(removed, n)
	}
	return removed, errors.Join(errs...), nil
}
