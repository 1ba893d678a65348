package flush

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff"
)

// Limits of a path the flush writes, from <linux/limits.h>: PATH_MAX (4096 including the
// NUL) and NAME_MAX (255 bytes per component).
const (
	maxPathLen = 4095
	maxNameLen = 255
)

// ValidatePath returns nil when p is a path the flush may write: non-empty, relative,
// '/'-separated, at most 4095 bytes, every component non-empty, not "." or "..", at most 255
// bytes, and free of NUL and control bytes (0x00–0x1f, 0x7f). Otherwise it returns an error
// wrapping ErrUnsafePath that names the path (quoted, so control bytes are escaped).
func ValidatePath(p string) error {
	bad := func(why string) error { return fmt.Errorf("path %q: %s: %w", p, why, ErrUnsafePath) }
	switch {
	case p == "":
		return bad("empty")
	case len(p) > maxPathLen:
		return bad("longer than PATH_MAX")
	case p[0] == '/':
		return bad("absolute")
	}
	for _, c := range strings.Split(p, "/") {
		switch {
		case c == "":
			return bad("empty component")
		case c == "." || c == "..":
			return bad("dot component")
		case len(c) > maxNameLen:
			return bad("component longer than NAME_MAX")
		}
		for i := 0; i < len(c); i++ {
			if c[i] < 0x20 || c[i] == 0x7f {
				return bad("control byte in name")
			}
		}
	}
	return nil
}

// checkLinkTarget returns nil when target, read from the symlink at linkPath (relative to
// the root), stays inside the root lexically: not empty, not absolute, only leading ".."
// components and no more of them than linkPath has parent directories, and no empty, "."
// or ".." component after them, and no ".git" component once resolved from linkPath's
// directory (diff.LinkIntoGitDir: a link must not rename git's own files). Targets are
// never printed: the error names linkPath and
// the class of the target only, and wraps ErrSymlinkTarget.
func checkLinkTarget(linkPath, target string) error {
	bad := func(class string) error {
		return fmt.Errorf("symlink %q: target is %s: %w", linkPath, class, ErrSymlinkTarget)
	}
	switch {
	case target == "":
		return bad("empty")
	case strings.IndexByte(target, 0) >= 0:
		return bad("not a valid name (NUL byte)")
	case target[0] == '/':
		return bad("absolute")
	}
	parts := strings.Split(target, "/")
	up := 0
	for up < len(parts) && parts[up] == ".." {
		up++
	}
	if up > strings.Count(linkPath, "/") || up == len(parts) {
		return bad("outside the workspace")
	}
	for _, c := range parts[up:] {
		if c == "" || c == "." || c == ".." {
			return bad("not canonical (empty, . or .. component)")
		}
	}
	if diff.LinkIntoGitDir(linkPath, target) {
		return bad("inside a .git directory")
	}
	return nil
}

// splitPath returns the parent directory ("" for the root) and the last component of the
// validated relative path p.
func splitPath(p string) (dir, name string) {
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[:i], p[i+1:]
	}
	return "", p
}

// resolveFlags make openat2 refuse any symlink (and magic link) on the way and any
// resolution that would leave the root fd's tree (see openat2(2)).
const resolveFlags = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

// openBeneath opens rel below the directory fd root with openat2, never following a
// symlink in any component (the last one included, which fails with ELOOP). A symlink or escape on the way is
// reported as ErrUnsafePath.
func openBeneath(root int, rel string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{
		// No O_NOFOLLOW: with RESOLVE_NO_SYMLINKS a symlink as the last component then fails
		// with ELOOP (O_NOFOLLOW|O_DIRECTORY would give ENOTDIR, O_PATH|O_NOFOLLOW the link).
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Mode:    uint64(mode),
		Resolve: resolveFlags,
	}
	for tries := 0; ; tries++ {
		fd, err := unix.Openat2(root, rel, &how)
		// EAGAIN: a concurrent rename raced the RESOLVE_BENEATH check; retry a few times.
		if (err == unix.EAGAIN || err == unix.EINTR) && tries < 16 {
			continue
		}
		if err == unix.ELOOP || err == unix.EXDEV {
			return -1, fmt.Errorf("open %q: %w: %w", rel, ErrUnsafePath, err)
		}
		if err != nil {
			return -1, &os.PathError{Op: "openat2", Path: rel, Err: err}
		}
		return fd, nil
	}
}

// tree is an open directory tree (W or S) whose directories are opened below its root fd
// with openBeneath and cached for one phase of work.
type tree struct {
	root int
	name string // for errors: "workspace" or "snapshot"
	mu   sync.Mutex
	dirs map[string]int
}

func openTree(path, name string) (*tree, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s %q: %w", name, path, err)
	}
	return &tree{root: fd, name: name, dirs: map[string]int{}}, nil
}

// dir returns an fd of the directory rel ("" for the root), opened without following any
// symlink; the fd stays owned by t.
func (t *tree) dir(rel string) (int, error) {
	if rel == "" {
		return t.root, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if fd, ok := t.dirs[rel]; ok {
		return fd, nil
	}
	fd, err := openBeneath(t.root, rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return -1, fmt.Errorf("open %s directory: %w", t.name, err)
	}
	t.dirs[rel] = fd
	return fd, nil
}

// forget closes cached directory fds so the next dir call resolves the path again (a
// directory may have been replaced between phases).
func (t *tree) forget() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, fd := range t.dirs {
		unix.Close(fd)
		delete(t.dirs, k)
	}
}

func (t *tree) close() {
	t.forget()
	unix.Close(t.root)
}

// lstat returns the lstat of rel below t (the parent resolved without symlinks).
// A missing entry gives ok == false and no error.
func (t *tree) lstat(rel string) (st unix.Stat_t, ok bool, err error) {
	d, name := splitPath(rel)
	pfd, err := t.dir(d)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		return st, false, nil
	}
	if err != nil {
		return st, false, err
	}
	err = unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("lstat %s %q: %w", t.name, rel, err)
	}
	return st, true, nil
}

// readlink returns the target of the symlink rel below t.
func (t *tree) readlink(rel string) (string, error) {
	d, name := splitPath(rel)
	pfd, err := t.dir(d)
	if err != nil {
		return "", err
	}
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(pfd, name, buf)
	if err != nil {
		return "", fmt.Errorf("readlink %s %q: %w", t.name, rel, err)
	}
	return string(buf[:n]), nil
}

// openFile opens the regular file rel below t for reading; it fails with ErrConflict if
// rel is not a regular file (FIFOs and devices are never opened: O_PATH first).
func (t *tree) openFile(rel string) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	pfd, err := openBeneath(t.root, rel, unix.O_PATH, 0)
	if err != nil {
		return nil, st, fmt.Errorf("open %s file: %w", t.name, err)
	}
	defer unix.Close(pfd)
	if err := unix.Fstat(pfd, &st); err != nil {
		return nil, st, fmt.Errorf("fstat %s %q: %w", t.name, rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, st, fmt.Errorf("open %s %q: not a regular file: %w", t.name, rel, ErrConflict)
	}
	// Re-open the very inode checked above for reading through its O_PATH fd.
	fd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", pfd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, st, fmt.Errorf("open %s %q: %w", t.name, rel, err)
	}
	return os.NewFile(uintptr(fd), rel), st, nil
}
