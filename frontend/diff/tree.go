package diff

import (
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/frontend/manifest"
)

// root is an open tree root (W or S). Every access below it is relative to its directory
// fd and never follows a symlink in any component (openat2 RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS, Linux ≥ 5.6; a component-wise O_NOFOLLOW walk on older kernels).
type root struct {
	name string // "W" or "S", for errors
	path string // as given, for errors only
	fd   int
}

// componentWalkOnly forces the pre-openat2 fallback (tests of the fallback).
var componentWalkOnly = false

func openRoot(name, path string) (*root, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s root %q: %w", name, path, &os.PathError{Op: "open", Path: path, Err: err})
	}
	return &root{name: name, path: path, fd: fd}, nil
}

func (r *root) close() { unix.Close(r.fd) }

// openBeneath opens rel (relative, '/'-separated) below r with flags, refusing symlinks
// in every component and any escape from the root.
func (r *root) openBeneath(rel string, flags int) (int, error) {
	if rel == "" {
		rel = "."
	}
	if componentWalkOnly {
		return r.openByComponents(rel, flags)
	}
	for {
		fd, err := openat2Beneath(r.fd, rel, flags|unix.O_CLOEXEC|unix.O_NOFOLLOW)
		if err == unix.EINTR || err == unix.EAGAIN {
			continue // EAGAIN: a concurrent rename raced the resolution; retry
		}
		if err == unix.ENOSYS {
			return r.openByComponents(rel, flags)
		}
		if err != nil {
			return -1, &os.PathError{Op: "openat2", Path: r.name + ":" + Escape(rel), Err: err}
		}
		return fd, nil
	}
}

// openByComponents is the pre-openat2 fallback: one openat(O_NOFOLLOW) per component.
func (r *root) openByComponents(rel string, flags int) (int, error) {
	if rel == "." {
		fd, err := unix.Openat(r.fd, ".", flags|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, &os.PathError{Op: "openat", Path: r.name + ":.", Err: err}
		}
		return fd, nil
	}
	comps := strings.Split(rel, "/")
	dir := r.fd
	for i, c := range comps {
		if c == "" || c == "." || c == ".." {
			if dir != r.fd {
				unix.Close(dir)
			}
			return -1, &os.PathError{Op: "openat", Path: r.name + ":" + Escape(rel), Err: ErrEscapesRoot}
		}
		fl := unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i == len(comps)-1 {
			fl = flags | unix.O_NOFOLLOW | unix.O_CLOEXEC
		}
		fd, err := unix.Openat(dir, c, fl, 0)
		if dir != r.fd {
			unix.Close(dir)
		}
		if err != nil {
			return -1, &os.PathError{Op: "openat", Path: r.name + ":" + Escape(rel), Err: err}
		}
		dir = fd
	}
	return dir, nil
}

// readlink returns the target of the symlink rel. The target is used only to compare and
// classify; it is never hashed or printed.
func (r *root) readlink(rel string) (string, error) {
	dir, base := "", rel
	if i := strings.LastIndexByte(rel, '/'); i >= 0 {
		dir, base = rel[:i], rel[i+1:]
	}
	pfd, err := r.openBeneath(dir, oPath|unix.O_DIRECTORY)
	if err != nil {
		return "", err
	}
	defer unix.Close(pfd)
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(pfd, base, buf)
		if err != nil {
			return "", &os.PathError{Op: "readlinkat", Path: r.name + ":" + Escape(rel), Err: err}
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// digest returns the content digest of the regular file rel below r (its data read,
// its holes skipped: package digest), whose walked stat was want. It returns
// ErrNotRegular or ErrChanged (wrapped) when the file is no longer what the walk saw.
func (r *root) digest(rel string, want manifest.Stat) (Digest, error) {
	fd, err := r.openBeneath(rel, unix.O_RDONLY|unix.O_NONBLOCK)
	if err != nil {
		return Digest{}, err
	}
	f := os.NewFile(uintptr(fd), r.name+":"+Escape(rel))
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return Digest{}, &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	got := manifest.FromStat(&st)
	if got.Type != manifest.TypeRegular {
		return Digest{}, fmt.Errorf("hash %s: %w", f.Name(), ErrNotRegular)
	}
	if got.Ino != want.Ino || got.Size != want.Size || got.Mtime != want.Mtime {
		return Digest{}, fmt.Errorf("hash %s: %w", f.Name(), ErrChanged)
	}
	d, err := digest.File(f)
	if err != nil {
		return Digest{}, fmt.Errorf("hash %s: %w", f.Name(), err)
	}
	if d.Size != want.Size {
		return Digest{}, fmt.Errorf("hash %s: %w", f.Name(), ErrChanged)
	}
	return d, nil
}
