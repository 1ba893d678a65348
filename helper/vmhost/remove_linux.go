//go:build linux

package vmhost

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// ErrForeignTree marks a run directory that could not be removed because it holds a
// directory of another uid (one its owner moved in): that tree is left as it is.
var ErrForeignTree = errors.New("run directory holds another user's directory")

// runDirDepth bounds the recursion into a directory tree the run dir's owner made.
const runDirDepth = 8

// removeRunDir removes the per-session run directory dir as its owner (removeRunDirAt).
// A missing dir is not an error.
func removeRunDir(dir string) error {
	pfd, err := unix.Open(filepath.Dir(dir), unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open run dirs", Path: filepath.Dir(dir), Err: err}
	}
	defer unix.Close(pfd)
	if err := removeRunDirAt(pfd, filepath.Base(dir)); err != nil {
		return fmt.Errorf("remove run dir %s: %w", dir, err)
	}
	return nil
}

// removeRunDirAt removes the entry name of the root-owned directory parent (the run
// dirs' parent): a non-directory is unlinked; a directory's contents are removed by a
// thread whose filesystem uid and gid are the directory's owner's (setfsuid(2): the
// kernel checks every unlink and rmdir against that uid, and the switch from fsuid 0
// drops the thread's CAP_CHOWN, CAP_DAC_OVERRIDE and CAP_FOWNER), so the helper can
// delete nothing the owner could not delete and chowns nothing. Below it, nothing is
// followed through a symlink (every open is O_NOFOLLOW relative to a descriptor), and a
// directory of any other uid is neither entered nor changed: it stays, and with it the
// run dir, which is then reported with ErrForeignTree. Then the emptied run dir itself
// is removed from parent as root (parent's owner). A missing entry is not an error.
func removeRunDirAt(parent int, name string) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return &os.PathError{Op: "stat", Path: name, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return unlinkAt(parent, name, 0)
	}
	foreign := 0
	err := asOwner(int(st.Uid), int(st.Gid), func() error {
		fd, err := openOwnDir(parent, name, st.Uid)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		foreign, err = emptyDir(fd, int(st.Uid), 0)
		return err
	})
	if err != nil {
		return err
	}
	if foreign > 0 {
		return fmt.Errorf("%d directories of another uid kept: %w", foreign, ErrForeignTree)
	}
	return unlinkAt(parent, name, unix.AT_REMOVEDIR)
}

// asOwner runs fn on a new, locked OS thread whose filesystem uid and gid are uid and
// gid (setfsuid(2), setfsgid(2): per thread; CAP_SETUID and CAP_SETGID). The goroutine
// returns with the thread still locked, so the Go runtime ends that thread instead of
// reusing it with the owner's identity.
func asOwner(uid, gid int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Setfsgid(gid); err != nil {
			done <- os.NewSyscallError("setfsgid", err)
			return
		}
		if err := unix.Setfsuid(uid); err != nil {
			done <- os.NewSyscallError("setfsuid", err)
			return
		}
		// setfsuid returns the previous value, never an error: read the value back.
		if cur, _ := unix.SetfsuidRetUid(-1); cur != uid {
			done <- fmt.Errorf("setfsuid %d: fsuid is %d: %w", uid, cur, unix.EPERM)
			return
		}
		done <- fn()
	}()
	return <-done
}

// emptyDir removes the entries of the directory fd, owned by owner, as owner (the caller
// runs it under asOwner): non-directories are unlinked, directories of owner are emptied
// (at most runDirDepth levels down) and removed, directories of another uid are kept
// untouched. It returns how many directories it kept.
func emptyDir(fd, owner, depth int) (int, error) {
	names, err := readDirNames(fd)
	if err != nil {
		return 0, err
	}
	kept := 0
	for _, n := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, n, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone meanwhile
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := unlinkAt(fd, n, 0); err != nil {
				return kept, err
			}
			continue
		}
		if int(st.Uid) != owner || depth+1 >= runDirDepth {
			kept++
			continue
		}
		sub, err := openOwnDir(fd, n, st.Uid)
		if err != nil {
			kept++ // replaced by something else meanwhile
			continue
		}
		k, err := emptyDir(sub, owner, depth+1)
		unix.Close(sub)
		if err != nil {
			return kept, err
		}
		if kept += k; k == 0 {
			if err := unlinkAt(fd, n, unix.AT_REMOVEDIR); err != nil {
				return kept, err
			}
		}
	}
	return kept, nil
}

// openOwnDir makes the directory name under dirfd readable and writable by its owner
// (who may have made it mode 0000) and opens it without following a symlink, checking
// that it is still owned by uid (it may have been swapped since it was stat'ed). It runs
// under asOwner: fchmodat(2) has no working no-follow flag, but as the owner it can only
// change what the owner could change anyway.
func openOwnDir(dirfd int, name string, uid uint32) (int, error) {
	if err := unix.Fchmodat(dirfd, name, 0o700, 0); err != nil {
		return -1, &os.PathError{Op: "chmod", Path: name, Err: err}
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, &os.PathError{Op: "open", Path: name, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Uid != uid {
		unix.Close(fd)
		return -1, fmt.Errorf("open %s: owner changed to uid %d: %w", name, st.Uid, ErrForeignTree)
	}
	return fd, nil
}

// readDirNames lists the directory fd (without . and ..) through a duplicate, so that fd
// itself stays open for the caller.
func readDirNames(fd int) ([]string, error) {
	dup, err := unix.Dup(fd)
	if err != nil {
		return nil, os.NewSyscallError("dup", err)
	}
	f := os.NewFile(uintptr(dup), "run dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list run dir: %w", err)
	}
	return names, nil
}

func unlinkAt(dirfd int, name string, flags int) error {
	if err := unix.Unlinkat(dirfd, name, flags); err != nil && !errors.Is(err, unix.ENOENT) {
		return &os.PathError{Op: "unlink", Path: name, Err: err}
	}
	return nil
}
