package oci

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Caps of a tree. The defaults hold every real image seen (a Debian image with Node
// and an agent CLI is ~60,000 entries and ~1 GB) with a wide margin.
const (
	// DefaultMaxEntries is the default cap on tar entries across all layers.
	DefaultMaxEntries = 1_000_000
	// DefaultMaxFileSize is the default cap on one regular file's declared size (4 GiB).
	DefaultMaxFileSize = 4 << 30
	// DefaultMaxTotalSize is the default cap on the declared sizes of all regular files
	// of all layers together (16 GiB), replaced files included.
	DefaultMaxTotalSize = 16 << 30
	// MaxPathLen is the longest entry name or symlink target in bytes: PATH_MAX
	// (linux/limits.h, 4096) less its NUL.
	MaxPathLen = 4095
	// MaxNameLen is the longest path component in bytes: NAME_MAX (linux/limits.h).
	MaxNameLen = 255
	// maxNotes bounds Report's lists; further notes are only counted.
	maxNotes = 100
)

// Limits bound what a tree may hold. A zero field takes its default.
type Limits struct {
	MaxEntries   int   // tar entries across all layers (DefaultMaxEntries)
	MaxFileSize  int64 // bytes one regular file declares (DefaultMaxFileSize)
	MaxTotalSize int64 // bytes all regular files declare together (DefaultMaxTotalSize)
}

func (l Limits) withDefaults() Limits {
	if l.MaxEntries <= 0 {
		l.MaxEntries = DefaultMaxEntries
	}
	if l.MaxFileSize <= 0 {
		l.MaxFileSize = DefaultMaxFileSize
	}
	if l.MaxTotalSize <= 0 {
		l.MaxTotalSize = DefaultMaxTotalSize
	}
	return l
}

// Note is one entry the unpacker changed or left out instead of refusing the layer.
type Note struct {
	Layer, Path string
	What        string // "setuid/setgid cleared", "device node skipped", ...
}

// Report is what Finish returns: counts and the neutralised entries (the first maxNotes,
// then only Dropped counts).
type Report struct {
	Entries int    // tar entries read
	Bytes   int64  // regular-file bytes declared
	Notes   []Note // entries changed (setuid/setgid cleared) or skipped (devices, FIFOs)
	Dropped int    // notes beyond the first maxNotes
}

// Tree is a directory being filled from layer tar streams, in order, by Apply. Every
// write is relative to the root's descriptor: parents are opened with openat2(2)
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV, new
// directories with mkdirat one component at a time, and leaves are created (O_EXCL,
// symlinkat, linkat without AT_SYMLINK_FOLLOW) after removing what was there, so no
// symlink a layer made is ever followed and no existing file is ever written into.
type Tree struct {
	root       int // O_DIRECTORY descriptor of the tree
	dir        string
	lim        Limits
	keepOwners bool
	owners     map[string]Owner   // with RecordOwners: each entry's owner from its layer
	dirs       map[string]dirMeta // modes and times applied by Finish, deepest first
	seen       map[string]bool    // paths of the current layer -> is a directory
	layer      string
	rep        Report
	buf        []byte
}

type dirMeta struct {
	mode  uint32
	mtime time.Time
}

// TreeOptions configure NewTree.
type TreeOptions struct {
	Limits Limits
	// KeepOwners applies each entry's uid and gid (lchown; needs CAP_CHOWN, so root).
	// Without it every entry belongs to the unpacking process.
	KeepOwners bool
	// RecordOwners keeps each entry's uid and gid in Owners instead, for ApplyOwners:
	// an unprivileged process unpacks, root applies only the owners.
	RecordOwners bool
}

// Owner is the uid and gid a layer gives an entry.
type Owner struct{ Uid, Gid int }

// NewTree creates the directory dir (mode 0755; it must not exist) and returns the Tree
// that fills it. Close releases it; Finish completes it.
func NewTree(dir string, o TreeOptions) (*Tree, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create image tree: %w", err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open image tree", Path: dir, Err: err}
	}
	if err := unix.Fchmod(fd, 0o755); err != nil { // whatever the umask
		unix.Close(fd)
		return nil, &os.PathError{Op: "chmod image tree", Path: dir, Err: err}
	}
	t := &Tree{root: fd, dir: dir, lim: o.Limits.withDefaults(), keepOwners: o.KeepOwners,
		dirs: map[string]dirMeta{}, buf: make([]byte, 128<<10)}
	if o.RecordOwners && !o.KeepOwners {
		t.owners = map[string]Owner{}
	}
	return t, nil
}

// Close releases the tree's descriptor (the directory stays). It is safe to call twice.
func (t *Tree) Close() {
	if t.root >= 0 {
		unix.Close(t.root)
		t.root = -1
	}
}

// Apply unpacks one uncompressed layer tar stream onto the tree, applying its whiteouts
// (".wh.NAME" removes NAME, ".wh..wh..opq" hides everything lower layers put in its
// directory). layer names the layer in errors. It reads r up to the tar trailer and
// returns the first refusal as an *EntryError; the tree is then incomplete and should
// be removed.
func (t *Tree) Apply(layer string, r io.Reader) error {
	t.layer, t.seen = layer, map[string]bool{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &EntryError{Layer: layer, Entry: "", Err: fmt.Errorf("read tar: %w", err)}
		}
		if err := t.entry(h, tr); err != nil {
			return &EntryError{Layer: layer, Entry: h.Name, Err: err}
		}
	}
}

// entry applies one tar header (and its content from r).
func (t *Tree) entry(h *tar.Header, r io.Reader) error {
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil // PAX global header: metadata only, nothing to write
	}
	t.rep.Entries++
	if t.rep.Entries > t.lim.MaxEntries {
		return fmt.Errorf("more than %d entries: %w", t.lim.MaxEntries, ErrLimit)
	}
	rel, err := cleanPath(h.Name)
	if err != nil {
		return err
	}
	if rel == "" {
		return nil // the root itself: it keeps mode 0755 and the unpacker's owner
	}
	parent, base := path.Split(rel)
	parent = strings.TrimSuffix(parent, "/")
	if strings.HasPrefix(base, whPrefix) {
		return t.whiteout(parent, base[len(whPrefix):])
	}
	isDir := h.Typeflag == tar.TypeDir
	if wasDir, dup := t.seen[rel]; dup && !(wasDir && isDir) {
		return fmt.Errorf("%s appears twice: %w", rel, ErrDuplicate)
	}
	switch h.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink, tar.TypeGNUSparse, tar.TypeCont:
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		t.note(rel, "device node or FIFO skipped")
		return nil
	default:
		return fmt.Errorf("tar type %q: %w", h.Typeflag, ErrUnsupported)
	}
	pfd, err := t.openParent(parent, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	t.markSeen(parent)
	t.seen[rel] = isDir
	switch h.Typeflag {
	case tar.TypeDir:
		return t.mkdir(pfd, base, rel, h)
	case tar.TypeSymlink:
		return t.symlink(pfd, base, rel, h)
	case tar.TypeLink:
		return t.hardlink(pfd, base, rel, h)
	}
	return t.file(pfd, base, rel, h, r)
}

// whPrefix marks a whiteout (OCI image spec, layer.md "Whiteouts"); opaque is the
// name after it of the opaque-directory marker.
const (
	whPrefix = ".wh."
	opaque   = ".wh..wh..opq"
)

// cleanPath turns a tar entry name into a path relative to the root ("" for the root
// itself): "./" prefixes and "." components dropped; absolute names, ".." components,
// NUL bytes, names over MaxPathLen and components over MaxNameLen refused.
func cleanPath(n string) (string, error) {
	switch {
	case len(n) > MaxPathLen:
		return "", fmt.Errorf("name of %d bytes, more than %d: %w", len(n), MaxPathLen, ErrUnsafePath)
	case strings.HasPrefix(n, "/"):
		return "", fmt.Errorf("absolute path: %w", ErrUnsafePath)
	case strings.IndexByte(n, 0) >= 0:
		return "", fmt.Errorf("NUL byte in name: %w", ErrUnsafePath)
	}
	parts := strings.Split(n, "/")
	out := parts[:0]
	for _, c := range parts {
		switch {
		case c == "" || c == ".":
			continue
		case c == "..":
			return "", fmt.Errorf(`".." component: %w`, ErrUnsafePath)
		case len(c) > MaxNameLen:
			return "", fmt.Errorf("component of %d bytes, more than %d: %w", len(c), MaxNameLen, ErrUnsafePath)
		}
		out = append(out, c)
	}
	return strings.Join(out, "/"), nil
}

// How directories are opened: never through a symlink, never out of the tree.
const (
	dirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	resolve  = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV
)

// openBeneath opens directory rel ("" or "." for the root) below the root.
func (t *Tree) openBeneath(rel string) (int, error) {
	if rel == "" {
		rel = "."
	}
	for {
		fd, err := unix.Openat2(t.root, rel, &unix.OpenHow{Flags: dirFlags, Resolve: resolve})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		return fd, err
	}
}

// openParent opens directory rel, creating missing components (mode 0755, set exactly
// by Finish) when create is set. A symlink on the way fails with ErrSymlinkPath, a
// non-directory with ErrNotDir.
func (t *Tree) openParent(rel string, create bool) (int, error) {
	fd, err := t.openBeneath(rel)
	if err == unix.ENOENT && create {
		fd, err = t.makeParents(rel)
	}
	return fd, t.pathErr(rel, err)
}

// pathErr maps an openat2 error on directory rel to the package's errors.
func (t *Tree) pathErr(rel string, err error) error {
	switch err {
	case nil:
		return nil
	case unix.ELOOP, unix.EXDEV:
		return fmt.Errorf("directory %s: %w", rel, ErrSymlinkPath)
	case unix.ENOTDIR:
		if t.isSymlink(rel) {
			return fmt.Errorf("directory %s: %w", rel, ErrSymlinkPath)
		}
		return fmt.Errorf("directory %s: %w", rel, ErrNotDir)
	}
	return &os.PathError{Op: "open directory", Path: rel, Err: err}
}

// isSymlink reports whether rel (below the root, reached without following symlinks)
// is itself a symlink: openat2 reports a trailing symlink opened O_DIRECTORY as ENOTDIR.
func (t *Tree) isSymlink(rel string) bool {
	fd, err := unix.Openat2(t.root, rel, &unix.OpenHow{Flags: unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC, Resolve: resolve})
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
}

// markSeen records directory rel and its ancestors as written by the current layer, so
// an opaque marker above keeps them.
func (t *Tree) markSeen(rel string) {
	for rel != "" && rel != "." {
		if _, ok := t.seen[rel]; ok {
			return
		}
		t.seen[rel] = true
		rel = path.Dir(rel)
	}
}

// makeParents opens rel one component at a time from the root, creating the missing
// ones; each is recorded as seen in this layer (an opaque marker keeps it).
func (t *Tree) makeParents(rel string) (int, error) {
	cur, err := unix.Dup(t.root)
	if err != nil {
		return -1, err
	}
	sofar := ""
	for _, c := range strings.Split(rel, "/") {
		sofar = path.Join(sofar, c)
		fd, err := unix.Openat2(cur, c, &unix.OpenHow{Flags: dirFlags, Resolve: resolve})
		if err == unix.ENOENT {
			if err = unix.Mkdirat(cur, c, 0o755); err == nil {
				t.dirs[sofar] = dirMeta{mode: 0o755}
				t.record(sofar, Owner{})
				t.seen[sofar] = true
				fd, err = unix.Openat2(cur, c, &unix.OpenHow{Flags: dirFlags, Resolve: resolve})
			}
		}
		unix.Close(cur)
		if err != nil {
			return -1, err
		}
		cur = fd
	}
	return cur, nil
}

// note records a neutralised entry of the current layer.
func (t *Tree) note(rel, what string) {
	if len(t.rep.Notes) >= maxNotes {
		t.rep.Dropped++
		return
	}
	t.rep.Notes = append(t.rep.Notes, Note{Layer: t.layer, Path: rel, What: what})
}

// mode returns h's permission bits with setuid and setgid cleared (noted), sticky kept.
func (t *Tree) mode(rel string, h *tar.Header) uint32 {
	m := uint32(h.Mode) & 0o7777
	if m&(unix.S_ISUID|unix.S_ISGID) != 0 {
		t.note(rel, "setuid/setgid cleared")
	}
	return m &^ (unix.S_ISUID | unix.S_ISGID)
}

// owner returns h's uid and gid, refusing ids chown(2) cannot set (negative, or
// 4294967295, which means "unchanged"), records them for rel when the tree records
// owners, and reports whether they are to be applied now (KeepOwners).
func (t *Tree) owner(rel string, h *tar.Header) (Owner, bool, error) {
	if !t.keepOwners && t.owners == nil {
		return Owner{}, false, nil
	}
	o := Owner{Uid: h.Uid, Gid: h.Gid}
	if !validOwner(o) {
		return o, false, fmt.Errorf("owner %d:%d out of range: %w", h.Uid, h.Gid, ErrUnsupported)
	}
	t.record(rel, o)
	return o, t.keepOwners, nil
}

func validOwner(o Owner) bool {
	return o.Uid >= 0 && o.Gid >= 0 && int64(o.Uid) < 1<<32-1 && int64(o.Gid) < 1<<32-1
}

// record notes rel's owner when the tree records owners.
func (t *Tree) record(rel string, o Owner) {
	if t.owners != nil {
		t.owners[rel] = o
	}
}

// Owners is the owner table of a tree made with RecordOwners (nil otherwise): every
// path a layer wrote, relative to the root, with its layer's owner. Paths later
// removed may remain; ApplyOwners passes over them.
func (t *Tree) Owners() map[string]Owner { return t.owners }

// chown gives name in pfd (path rel) h's owner when the tree keeps owners (never
// following a symlink).
func (t *Tree) chown(pfd int, name, rel string, h *tar.Header) error {
	o, apply, err := t.owner(rel, h)
	if err != nil || !apply {
		return err
	}
	if err := unix.Fchownat(pfd, name, o.Uid, o.Gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "lchown", Path: rel, Err: err}
	}
	return nil
}

// setTimes sets name's modification (and access) time to h's, never following a symlink.
func setTimes(pfd int, name string, mtime time.Time) error {
	ts := unix.NsecToTimespec(mtime.UnixNano())
	if err := unix.UtimesNanoAt(pfd, name, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return &os.PathError{Op: "utimensat", Path: name, Err: err}
	}
	return nil
}

// Finish applies the directories' modes and times, deepest first, and returns the report.
// Directories that later layers removed or replaced are passed over.
func (t *Tree) Finish() (Report, error) {
	rels := make([]string, 0, len(t.dirs))
	for rel := range t.dirs {
		rels = append(rels, rel)
	}
	sort.Slice(rels, func(i, j int) bool {
		if a, b := strings.Count(rels[i], "/"), strings.Count(rels[j], "/"); a != b {
			return a > b
		}
		return rels[i] < rels[j]
	})
	for _, rel := range rels {
		fd, err := t.openBeneath(rel)
		if err == unix.ENOENT || err == unix.ENOTDIR || err == unix.ELOOP {
			continue
		}
		if err != nil {
			return t.rep, &os.PathError{Op: "open directory", Path: rel, Err: err}
		}
		m := t.dirs[rel]
		err = unix.Fchmod(fd, m.mode)
		if err == nil && !m.mtime.IsZero() {
			tv := unix.NsecToTimeval(m.mtime.UnixNano())
			err = unix.Futimes(fd, []unix.Timeval{tv, tv})
		}
		unix.Close(fd)
		if err != nil {
			return t.rep, &os.PathError{Op: "set directory mode", Path: rel, Err: err}
		}
	}
	return t.rep, nil
}

// isNotExist reports whether err is ENOENT.
func isNotExist(err error) bool { return errors.Is(err, unix.ENOENT) }
