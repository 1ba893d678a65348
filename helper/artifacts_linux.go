package helper

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/sys/unix"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox/image"
)

// Where the helper finds what a VM boots from, relative to Config.StateDir (by default
// /var/lib/brood, the same root-owned caches sandbox/kernel, sandbox/initramfs and
// sandbox/image fill when run as root):
//
//	kernels/<release>/vmlinux                           the PVH kernel (sandbox/kernel)
//	kernels/<release>/ready                             marks a complete kernel entry
//	kernels/<release>/initramfs/initramfs-<hex32>.cpio.gz  base initramfs (sandbox/initramfs)
//	images/<name>-<hex32><image.Ext>                    rootfs images (sandbox/image)
//
// Every path component is opened with O_NOFOLLOW relative to its parent's descriptor and
// must be owned by root and not writable by group or others; the helper never opens a
// path a client names (an image is chosen by a validated name).
const (
	kernelsDir    = "kernels"
	imagesDir     = "images"
	initramfsDir  = "initramfs"
	vmlinuxName   = "vmlinux"
	kernelReady   = "ready"
	initramfsGlob = "initramfs-*.cpio.gz"
)

// artifacts are a VM's boot files, opened read-only by the helper and passed to the
// runner as descriptors.
type artifacts struct {
	Release string   // kernel release, e.g. "6.1.0-57-amd64"
	Kernel  *os.File // vmlinux
	Initrd  *os.File // base initramfs (the session archive is appended to a copy)
	Image   *os.File // rootfs image
}

// Close closes every opened file.
func (a *artifacts) Close() {
	for _, f := range []*os.File{a.Kernel, a.Initrd, a.Image} {
		if f != nil {
			f.Close()
		}
	}
}

// openArtifacts opens the kernel (cfg.KernelRelease, or the newest complete one), its
// base initramfs (cfg.Initramfs, or the newest) and the newest image called image.
// Missing files wrap api.ErrUnavailable; unsafe ones (symlink, wrong owner or mode) wrap
// ErrUnsafeArtifact.
func openArtifacts(cfg *Config, imageName string) (_ *artifacts, err error) {
	if !api.ValidImageName(imageName) {
		return nil, fmt.Errorf("image name %q: %w", imageName, api.ErrBadRequest)
	}
	a, err := openArtifactsNoImage(cfg)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	root, err := openTrustedDir(-1, cfg.StateDir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	imgs, err := openTrustedDir(int(root.Fd()), imagesDir)
	if err != nil {
		return nil, err
	}
	defer imgs.Close()
	imageRe := regexp.MustCompile(`^` + regexp.QuoteMeta(imageName) + `-[0-9a-f]{32}` + regexp.QuoteMeta(image.Ext) + `$`)
	iname, err := newestEntry(imgs, imageRe.MatchString)
	if err != nil {
		return nil, fmt.Errorf("image %q: %w", imageName, err)
	}
	if a.Image, err = openTrustedFile(imgs, iname); err != nil {
		return nil, err
	}
	return a, nil
}

// newestKernel returns the release of the most recently completed kernel entry (the one
// whose ready marker is newest).
func newestKernel(kdir *os.File) (string, error) {
	names, err := readNames(kdir)
	if err != nil {
		return "", err
	}
	best, bestT := "", int64(-1)
	for _, n := range names {
		if !releaseRe.MatchString(n) {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(int(kdir.Fd()), n+"/"+kernelReady, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			continue
		}
		if t := st.Mtim.Nano(); t > bestT {
			best, bestT = n, t
		}
	}
	if best == "" {
		return "", fmt.Errorf("no complete guest kernel in %s: %w", kdir.Name(), api.ErrUnavailable)
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
		return "", fmt.Errorf("nothing in %s: %w", dir.Name(), api.ErrUnavailable)
	}
	return best, nil
}

// readNames lists dir through a duplicate of its descriptor (ReadDirnames moves the
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

// openTrustedDir opens name (one component, or an absolute path when parent is -1, each
// of whose components is checked) as a directory without following symlinks and checks
// it is owned by root and not writable by group or others. The ancestors of an absolute
// path are opened O_PATH (Landlock does not let the confined helper read "/").
func openTrustedDir(parent int, name string) (*os.File, error) {
	if parent >= 0 {
		return openTrustedDirAt(parent, name, unix.O_RDONLY)
	}
	if !filepath.IsAbs(name) || filepath.Clean(name) != name || name == "/" {
		return nil, fmt.Errorf("artifact root %q is not a clean absolute path below /: %w", name, ErrUnsafeArtifact)
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
		// Ancestors are opened O_PATH and may be sticky world-writable (/tmp: nobody
		// but root can replace a root-owned entry there).
		mode := unix.O_PATH
		if i == len(comps)-1 {
			mode = unix.O_RDONLY
		}
		next, err := openTrustedDirAt(int(cur.Fd()), c, mode)
		cur.Close()
		if err != nil {
			return nil, err
		}
		cur = next
	}
	return cur, nil
}

// openTrustedDirAt is openTrustedDir for one component, opened with mode (O_RDONLY or
// O_PATH).
func openTrustedDirAt(parent int, name string, mode int) (*os.File, error) {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return nil, fmt.Errorf("artifact path component %q: %w", name, ErrUnsafeArtifact)
	}
	fd, err := unix.Openat(parent, name, mode|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, artifactOpenErr(name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := checkTrusted(f, unix.S_IFDIR); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// openTrustedFile opens the regular file name in dir read-only, without following a
// symlink, and checks owner and mode like openTrustedDir.
func openTrustedFile(dir *os.File, name string) (*os.File, error) {
	if name == "" || name == "." || name == ".." || strings.Contains(name, "/") {
		return nil, fmt.Errorf("artifact name %q: %w", name, ErrUnsafeArtifact)
	}
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, artifactOpenErr(name, err)
	}
	f := os.NewFile(uintptr(fd), dir.Name()+"/"+name)
	if err := checkTrusted(f, unix.S_IFREG); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func artifactOpenErr(name string, err error) error {
	switch {
	case errors.Is(err, unix.ENOENT):
		return fmt.Errorf("open artifact %q: %w: %w", name, api.ErrUnavailable, err)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
		return fmt.Errorf("open artifact %q: a symlink or not a directory: %w: %w", name, ErrUnsafeArtifact, err)
	}
	return &os.PathError{Op: "open artifact", Path: name, Err: err}
}

// checkTrusted requires f to have file type typ, owner root, and no group or other write
// permission (sticky directories opened O_PATH, i.e. ancestors of the state dir, may be
// writable: only their owner can replace the entries of others).
func checkTrusted(f *os.File, typ uint32) error {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return &os.PathError{Op: "fstat", Path: f.Name(), Err: err}
	}
	flags, _ := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	ancestor := flags&unix.O_PATH != 0 && typ == unix.S_IFDIR && st.Mode&unix.S_ISVTX != 0
	switch {
	case st.Mode&unix.S_IFMT != typ:
		return fmt.Errorf("artifact %s has file type %#o, want %#o: %w", f.Name(), st.Mode&unix.S_IFMT, typ, ErrUnsafeArtifact)
	case st.Uid != 0:
		return fmt.Errorf("artifact %s is owned by uid %d, not root: %w", f.Name(), st.Uid, ErrUnsafeArtifact)
	case st.Mode&0o022 != 0 && !ancestor:
		return fmt.Errorf("artifact %s has mode %#o (writable by group or others): %w", f.Name(), st.Mode&0o7777, ErrUnsafeArtifact)
	}
	return nil
}

// artifactsCheck reports for Doctor which guest kernel and base initramfs StartVM would
// boot and which images exist, or why none can be used.
func artifactsCheck(cfg *Config) api.Check {
	c := api.Check{Name: "guest artifacts"}
	a, err := openArtifactsNoImage(cfg)
	if err != nil {
		c.Detail = err.Error()
		return c
	}
	defer a.Close()
	var imgs []string
	if root, err := openTrustedDir(-1, cfg.StateDir); err == nil {
		if d, err := openTrustedDir(int(root.Fd()), imagesDir); err == nil {
			names, _ := readNames(d)
			for _, n := range names {
				if strings.HasSuffix(n, image.Ext) && !strings.HasPrefix(n, ".") {
					imgs = append(imgs, n)
				}
			}
			d.Close()
		}
		root.Close()
	}
	c.OK = len(imgs) > 0
	c.Detail = fmt.Sprintf("kernel %s, initramfs %s, images %v", a.Release, filepath.Base(a.Initrd.Name()), imgs)
	return c
}

// openArtifactsNoImage opens the kernel and initramfs like openArtifacts.
func openArtifactsNoImage(cfg *Config) (_ *artifacts, err error) {
	root, err := openTrustedDir(-1, cfg.StateDir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	a := &artifacts{}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	kdir, err := openTrustedDir(int(root.Fd()), kernelsDir)
	if err != nil {
		return nil, err
	}
	defer kdir.Close()
	a.Release = cfg.KernelRelease
	if a.Release == "" {
		if a.Release, err = newestKernel(kdir); err != nil {
			return nil, err
		}
	}
	rel, err := openTrustedDir(int(kdir.Fd()), a.Release)
	if err != nil {
		return nil, err
	}
	defer rel.Close()
	if a.Kernel, err = openTrustedFile(rel, vmlinuxName); err != nil {
		return nil, err
	}
	idir, err := openTrustedDir(int(rel.Fd()), initramfsDir)
	if err != nil {
		return nil, err
	}
	defer idir.Close()
	name := cfg.Initramfs
	if name == "" {
		if name, err = newestEntry(idir, initramfsRe.MatchString); err != nil {
			return nil, err
		}
	}
	if a.Initrd, err = openTrustedFile(idir, name); err != nil {
		return nil, err
	}
	return a, nil
}
