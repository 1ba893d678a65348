package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The trusted reader: every path component is opened with O_NOFOLLOW relative to its
// parent's descriptor and must be owned by root and not writable by group or others
// (ancestors of the root opened O_PATH may be sticky and world-writable, like /tmp:
// only root can replace a root-owned entry there). A reader never opens a path a
// client names; entries are chosen by validated names.

// Boot is a kernel release's boot files, opened read-only.
type Boot struct {
	Release   string   // kernel release, e.g. "6.1.0-57-amd64"
	Kernel    *os.File // vmlinux
	Initramfs *os.File // the base initramfs
}

// Close closes the opened files.
func (b *Boot) Close() {
	for _, f := range []*os.File{b.Kernel, b.Initramfs} {
		if f != nil {
			f.Close()
		}
	}
}

// Image describes one image file of the store.
type Image struct {
	Name    string    // image name, e.g. "test"
	File    string    // file name under Images(), e.g. "test-<hex32>.erofs"
	Digest  string    // the 32 hex digits of the tree digest in File
	Size    int64     // bytes
	ModTime time.Time // when it was stored

	unsafe bool // fails checkStat: not listed, refused when opened
}

// OpenBoot opens the kernel of release (empty: the release whose ready marker is newest)
// and its base initramfs file initramfs (empty: the newest). A missing entry wraps
// ErrMissing, an unsafe one ErrUnsafe.
func (l Layout) OpenBoot(release, initramfs string) (_ *Boot, err error) {
	root, err := l.openRoot()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	kdir, err := openDirAt(root, KernelsDir, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer kdir.Close()
	b := &Boot{Release: release}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	if b.Release == "" {
		if b.Release, err = newestRelease(kdir); err != nil {
			return nil, err
		}
	}
	if !ValidRelease(b.Release) {
		return nil, fmt.Errorf("kernel release %q: %w", b.Release, ErrUnsafe)
	}
	rel, err := openDirAt(kdir, b.Release, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer rel.Close()
	if b.Kernel, err = openFile(rel, VmlinuxName); err != nil {
		return nil, err
	}
	idir, err := openDirAt(rel, InitramfsDir, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer idir.Close()
	if initramfs == "" {
		if initramfs, err = newestEntry(idir, ValidInitramfsFile); err != nil {
			return nil, err
		}
	}
	if b.Initramfs, err = openFile(idir, initramfs); err != nil {
		return nil, err
	}
	return b, nil
}

// OpenImage opens the image called name that ListImages lists (the newest file of that
// name), read-only.
func (l Layout) OpenImage(name string) (*os.File, error) {
	if !ValidImageName(name) {
		return nil, fmt.Errorf("image name %q: %w", name, ErrUnsafe)
	}
	dir, err := l.openImages()
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	imgs, err := listImages(dir, false)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(imgs, func(im Image) bool { return im.Name == name })
	if i < 0 {
		return nil, fmt.Errorf("image %q in %s: %w", name, dir.Name(), ErrMissing)
	}
	return openFile(dir, imgs[i].File)
}

// ListImages returns the images a reader boots, one per name (the newest file, by
// modification time), sorted by name. Only root-owned regular files that are not
// writable by group or others are listed; a missing images directory lists nothing.
func (l Layout) ListImages() ([]Image, error) {
	dir, err := l.openImages()
	if errors.Is(err, ErrMissing) {
		return []Image{}, nil
	}
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	return listImages(dir, true)
}

func (l Layout) openImages() (*os.File, error) {
	root, err := l.openRoot()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return openDirAt(root, ImagesDir, unix.O_RDONLY)
}

// listImages returns the newest file of every image name in dir; trustedOnly drops the
// names whose newest file fails the owner and mode checks (ListImages), otherwise
// opening it reports why (OpenImage).
func listImages(dir *os.File, trustedOnly bool) ([]Image, error) {
	names, err := readNames(dir)
	if err != nil {
		return nil, err
	}
	newest := map[string]Image{}
	for _, n := range names {
		name, digest, ok := ParseImageFile(n)
		if !ok {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(int(dir.Fd()), n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		im := Image{Name: name, File: n, Digest: digest, Size: st.Size, ModTime: time.Unix(0, st.Mtim.Nano())}
		im.unsafe = checkStat(filepath.Join(dir.Name(), n), &st, unix.S_IFREG, false) != nil
		if old, ok := newest[name]; !ok || im.ModTime.After(old.ModTime) || (im.ModTime.Equal(old.ModTime) && im.File > old.File) {
			newest[name] = im
		}
	}
	out := make([]Image, 0, len(newest))
	for _, im := range newest {
		if !im.unsafe || !trustedOnly {
			out = append(out, im)
		}
	}
	slices.SortFunc(out, func(a, b Image) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// newestRelease returns the kernel release whose ready marker is newest.
func newestRelease(kdir *os.File) (string, error) {
	names, err := readNames(kdir)
	if err != nil {
		return "", err
	}
	best, bestT := "", int64(-1)
	for _, n := range names {
		if !ValidRelease(n) {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(int(kdir.Fd()), n+"/"+ReadyName, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		if t := st.Mtim.Nano(); t > bestT {
			best, bestT = n, t
		}
	}
	if best == "" {
		return "", fmt.Errorf("no complete guest kernel in %s: %w", kdir.Name(), ErrMissing)
	}
	return best, nil
}

// newestEntry returns the name accepted by match with the newest mtime in dir.
func newestEntry(dir *os.File, match func(string) bool) (string, error) {
	names, err := readNames(dir)
	if err != nil {
		return "", err
	}
	best, bestT := "", int64(-1)
	for _, n := range names {
		if !match(n) {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(int(dir.Fd()), n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		if t := st.Mtim.Nano(); t > bestT {
			best, bestT = n, t
		}
	}
	if best == "" {
		return "", fmt.Errorf("nothing in %s: %w", dir.Name(), ErrMissing)
	}
	return best, nil
}

// readNames lists dir through a duplicate of its descriptor (Readdirnames moves the
// offset of the descriptor it reads).
func readNames(dir *os.File) ([]string, error) {
	fd, err := unix.Openat(int(dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir.Name(), Err: err}
	}
	f := os.NewFile(uintptr(fd), dir.Name())
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir.Name(), err)
	}
	return names, nil
}

// openRoot opens Root, checking every component from "/" down. The ancestors are opened
// O_PATH (Landlock does not let the confined helper read "/").
func (l Layout) openRoot() (*os.File, error) {
	name := l.Root
	if !filepath.IsAbs(name) || filepath.Clean(name) != name || name == "/" {
		return nil, fmt.Errorf("artifact root %q is not a clean absolute path below /: %w", name, ErrUnsafe)
	}
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: "/", Err: err}
	}
	cur := os.NewFile(uintptr(fd), "/")
	if err := checkTrusted(cur, unix.S_IFDIR); err != nil {
		cur.Close()
		return nil, err
	}
	comps := strings.Split(strings.TrimPrefix(name, "/"), "/")
	for i, c := range comps {
		mode := unix.O_PATH
		if i == len(comps)-1 {
			mode = unix.O_RDONLY
		}
		next, err := openDirAt(cur, c, mode)
		cur.Close()
		if err != nil {
			return nil, err
		}
		cur = next
	}
	return cur, nil
}

// openDirAt opens the directory name (one component) below parent with mode (O_RDONLY
// or O_PATH), without following a symlink, and checks it.
func openDirAt(parent *os.File, name string, mode int) (*os.File, error) {
	if !oneComponent(name) {
		return nil, fmt.Errorf("artifact path component %q: %w", name, ErrUnsafe)
	}
	fd, err := unix.Openat(int(parent.Fd()), name, mode|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, openErr(name, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(parent.Name(), name))
	if err := checkTrusted(f, unix.S_IFDIR); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openFile opens the regular file name in dir read-only, without following a symlink
// (and without blocking on a FIFO), and checks it.
func openFile(dir *os.File, name string) (*os.File, error) {
	if !oneComponent(name) {
		return nil, fmt.Errorf("artifact name %q: %w", name, ErrUnsafe)
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, openErr(name, err)
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir.Name(), name))
	if err := checkTrusted(f, unix.S_IFREG); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func oneComponent(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.Contains(name, "/")
}

func openErr(name string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("open artifact %q: %w: %w", name, ErrMissing, err)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("open artifact %q: a symlink or not a directory: %w: %w", name, ErrUnsafe, err)
	}
	return &os.PathError{Op: "open artifact", Path: name, Err: err}
}

// checkTrusted requires f to have file type typ, owner root, and no group or other write
// permission; a sticky directory opened O_PATH (an ancestor of the root) may be writable.
func checkTrusted(f *os.File, typ uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	flags, _ := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	return checkStat(f.Name(), &st, typ, flags&unix.O_PATH != 0)
}

func checkStat(name string, st *unix.Stat_t, typ uint32, ancestor bool) error {
	sticky := ancestor && typ == unix.S_IFDIR && st.Mode&unix.S_ISVTX != 0
	switch {
	case st.Mode&unix.S_IFMT != typ:
		return fmt.Errorf("artifact %s has file type %#o, want %#o: %w", name, st.Mode&unix.S_IFMT, typ, ErrUnsafe)
	case st.Uid != 0:
		return fmt.Errorf("artifact %s is owned by uid %d, not root: %w", name, st.Uid, ErrUnsafe)
	case st.Mode&0o022 != 0 && !sticky:
		return fmt.Errorf("artifact %s has mode %#o (writable by group or others): %w", name, st.Mode&0o7777, ErrUnsafe)
	}
	return nil
}
