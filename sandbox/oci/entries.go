package oci

import (
	"archive/tar"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// fileFlags create a regular file that did not exist, never through a symlink.
const fileFlags = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC

// clearFor makes room for a new entry name in pfd: it removes what is there, except a
// directory when keepDir is set (a directory entry over a lower layer's directory
// merges into it). It reports whether a directory was kept.
func clearFor(pfd int, name string, keepDir bool) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
	if err == unix.ENOENT {
		return false, nil
	}
	if err != nil {
		return false, &os.PathError{Op: "lstat", Path: name, Err: err}
	}
	if keepDir && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return true, nil
	}
	return false, removeAt(pfd, name)
}

// removeAt removes name in pfd and, for a directory, everything below it, opening each
// directory O_NOFOLLOW relative to its parent. A missing name is not an error.
func removeAt(pfd int, name string) error {
	err := unix.Unlinkat(pfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR {
		return &os.PathError{Op: "unlink", Path: name, Err: err}
	}
	fd, err := unix.Openat(pfd, name, dirFlags, 0)
	if err != nil {
		return &os.PathError{Op: "open directory", Path: name, Err: err}
	}
	names, err := readNames(fd)
	if err == nil {
		for _, n := range names {
			if err = removeAt(fd, n); err != nil {
				break
			}
		}
	}
	unix.Close(fd)
	if err != nil {
		return err
	}
	if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err != nil {
		return &os.PathError{Op: "rmdir", Path: name, Err: err}
	}
	return nil
}

// readNames lists the directory open at fd (without "." and ".."); fd stays open.
func readNames(fd int) ([]string, error) {
	d, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(d), "dir")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("read directory: %w", err)
	}
	return names, nil
}

// mkdir creates directory base in pfd (or keeps the one there) and records its mode and
// time for Finish.
func (t *Tree) mkdir(pfd int, base, rel string, h *tar.Header) error {
	kept, err := clearFor(pfd, base, true)
	if err != nil {
		return err
	}
	if !kept {
		if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
			return &os.PathError{Op: "mkdir", Path: rel, Err: err}
		}
	}
	if err := t.chown(pfd, base, rel, h); err != nil {
		return err
	}
	t.dirs[rel] = dirMeta{mode: t.mode(rel, h), mtime: h.ModTime}
	return nil
}

// symlink creates symlink base in pfd pointing at h.Linkname, which is stored as written
// and never followed by the unpacker.
func (t *Tree) symlink(pfd int, base, rel string, h *tar.Header) error {
	if h.Linkname == "" || len(h.Linkname) > MaxPathLen || strings.IndexByte(h.Linkname, 0) >= 0 {
		return fmt.Errorf("symlink target of %d bytes: %w", len(h.Linkname), ErrUnsafePath)
	}
	if _, err := clearFor(pfd, base, false); err != nil {
		return err
	}
	if err := unix.Symlinkat(h.Linkname, pfd, base); err != nil {
		return &os.PathError{Op: "symlink", Path: base, Err: err}
	}
	if err := t.chown(pfd, base, rel, h); err != nil {
		return err
	}
	return setTimes(pfd, base, h.ModTime)
}

// hardlink links base in pfd to h.Linkname, a path of the tree (from the root, not from
// base's directory) that must already be a regular file or symlink there.
func (t *Tree) hardlink(pfd int, base, rel string, h *tar.Header) error {
	target, err := cleanPath(h.Linkname)
	if err != nil {
		return fmt.Errorf("hardlink target %q: %w", h.Linkname, err)
	}
	if target == "" || target == rel {
		return fmt.Errorf("hardlink to %q: %w", h.Linkname, ErrHardlink)
	}
	tdir, tbase := path.Split(target)
	tfd, err := t.openParent(strings.TrimSuffix(tdir, "/"), false)
	if isNotExist(err) {
		return fmt.Errorf("hardlink target %s: %w", target, ErrHardlink)
	}
	if err != nil {
		return fmt.Errorf("hardlink target %s: %w", target, err)
	}
	defer unix.Close(tfd)
	var st unix.Stat_t
	if err := unix.Fstatat(tfd, tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || (st.Mode&unix.S_IFMT != unix.S_IFREG && st.Mode&unix.S_IFMT != unix.S_IFLNK) {
		return fmt.Errorf("hardlink target %s (not an existing file of the tree): %w", target, ErrHardlink)
	}
	if _, err := clearFor(pfd, base, false); err != nil {
		return err
	}
	if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
		return &os.PathError{Op: "link", Path: rel, Err: err}
	}
	if o, ok := t.owners[target]; ok { // the inode's owner, under both names
		t.record(rel, o)
	}
	return nil
}

// file creates regular file base in pfd with h's content from r, after checking its
// declared size against the caps (so nothing is written for a refused size). Runs of
// zero bytes become holes.
func (t *Tree) file(pfd int, base, rel string, h *tar.Header, r io.Reader) error {
	if h.Size < 0 || h.Size > t.lim.MaxFileSize {
		return fmt.Errorf("file of %d bytes, more than the %d-byte cap: %w", h.Size, t.lim.MaxFileSize, ErrLimit)
	}
	if t.rep.Bytes+h.Size > t.lim.MaxTotalSize {
		return fmt.Errorf("file of %d bytes after %d: more than the %d-byte total cap: %w",
			h.Size, t.rep.Bytes, t.lim.MaxTotalSize, ErrLimit)
	}
	t.rep.Bytes += h.Size
	if _, err := clearFor(pfd, base, false); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, base, fileFlags, 0o600)
	if err != nil {
		return &os.PathError{Op: "create", Path: rel, Err: err}
	}
	defer unix.Close(fd)
	if err := t.writeSparse(fd, r, h.Size); err != nil {
		return fmt.Errorf("write %s: %w", rel, err)
	}
	o, apply, err := t.owner(rel, h)
	if err != nil {
		return err
	}
	if apply {
		if err := unix.Fchown(fd, o.Uid, o.Gid); err != nil {
			return &os.PathError{Op: "chown", Path: rel, Err: err}
		}
	}
	if err := unix.Fchmod(fd, t.mode(rel, h)); err != nil { // after chown, which clears setuid
		return &os.PathError{Op: "chmod", Path: rel, Err: err}
	}
	return setTimes(pfd, base, h.ModTime)
}

// writeSparse copies exactly size bytes from r to fd, seeking over all-zero blocks, and
// sets the file's size.
func (t *Tree) writeSparse(fd int, r io.Reader, size int64) error {
	var off int64
	for off < size {
		n, err := io.ReadFull(r, t.buf[:min(int64(len(t.buf)), size-off)])
		if err != nil {
			return fmt.Errorf("read tar content: %w", err)
		}
		if !allZero(t.buf[:n]) {
			for b, o := t.buf[:n], off; len(b) > 0; {
				w, err := unix.Pwrite(fd, b, o)
				if err == unix.EINTR {
					continue
				}
				if err != nil {
					return err
				}
				b, o = b[w:], o+int64(w)
			}
		}
		off += int64(n)
	}
	return unix.Ftruncate(fd, size)
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// whiteout applies ".wh."+name in directory parent: the opaque marker, or the removal of
// name. Whiteouts write nothing; one naming "." or ".." or nothing is refused.
func (t *Tree) whiteout(parent, name string) error {
	switch {
	case name == opaque[len(whPrefix):]:
		return t.opaqueDir(parent)
	case name == "" || name == "." || name == "..":
		return fmt.Errorf("whiteout of %q: %w", name, ErrUnsafePath)
	case strings.HasPrefix(name, whPrefix):
		return nil // other AUFS metadata (.wh..wh.plnk, ...): ignored, as Docker does
	}
	pfd, err := t.openParent(parent, false)
	if isNotExist(err) {
		return nil // nothing below to hide
	}
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	return removeAt(pfd, name)
}

// opaqueDir removes from directory rel everything the current layer did not put there.
func (t *Tree) opaqueDir(rel string) error {
	fd, err := t.openParent(rel, false)
	if isNotExist(err) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return t.removeUnseen(fd, rel)
}

// removeUnseen removes the entries of directory fd (path rel) that the current layer
// has not written, recursing into the directories it has.
func (t *Tree) removeUnseen(fd int, rel string) error {
	names, err := readNames(fd)
	if err != nil {
		return err
	}
	for _, n := range names {
		p := path.Join(rel, n)
		isDir, ok := t.seen[p]
		if !ok {
			if err := removeAt(fd, n); err != nil {
				return err
			}
			continue
		}
		if !isDir {
			continue
		}
		cfd, err := unix.Openat(fd, n, dirFlags, 0)
		if err != nil {
			return &os.PathError{Op: "open directory", Path: p, Err: err}
		}
		err = t.removeUnseen(cfd, p)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}
