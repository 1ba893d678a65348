package oci

import (
	"fmt"
	"os"
	"path"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// ApplyOwners gives the entries of the tree at dir the owners of table (from
// Tree.Owners of an unprivileged unpack), with lchown relative to the tree's descriptor:
// parents opened with openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, the entry itself
// never followed. The table is untrusted: a path that is not clean and relative (see
// the layer rules) or an owner chown(2) cannot set fails the call; a path that no longer
// exists or now lies below a symlink or non-directory is passed over. Needs CAP_CHOWN.
func ApplyOwners(dir string, table map[string]Owner) error {
	root, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open image tree", Path: dir, Err: err}
	}
	defer unix.Close(root)
	t := &Tree{root: root}
	rels := make([]string, 0, len(table))
	for rel := range table {
		rels = append(rels, rel)
	}
	sort.Strings(rels) // a deterministic order
	for _, rel := range rels {
		if c, err := cleanPath(rel); err != nil || c != rel || c == "" || !validOwner(table[rel]) {
			return fmt.Errorf("owner table of %s: entry %q %v: %w", dir, rel, table[rel], ErrUnsafePath)
		}
		if err := t.applyOwner(rel, table[rel]); err != nil {
			return fmt.Errorf("owner table of %s: %w", dir, err)
		}
	}
	return nil
}

// applyOwner lchowns rel to o, passing over a path that is gone or unreachable.
func (t *Tree) applyOwner(rel string, o Owner) error {
	parent, base := path.Split(rel)
	pfd, err := t.openBeneath(strings.TrimSuffix(parent, "/"))
	switch err {
	case nil:
	case unix.ENOENT, unix.ENOTDIR, unix.ELOOP, unix.EXDEV:
		return nil
	default:
		return &os.PathError{Op: "open directory", Path: parent, Err: err}
	}
	defer unix.Close(pfd)
	err = unix.Fchownat(pfd, base, o.Uid, o.Gid, unix.AT_SYMLINK_NOFOLLOW)
	if err != nil && err != unix.ENOENT {
		return &os.PathError{Op: "lchown", Path: rel, Err: err}
	}
	return nil
}
