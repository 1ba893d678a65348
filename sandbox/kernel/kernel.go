// Package kernel fetches and unpacks the Debian guest kernel brood boots, once per kernel
// version, without installing anything on the host.
//
// Recipe: `apt-get download linux-image-<abi>-amd64` (the generic flavour: the
// cloud flavour has no 9p), `dpkg-deb -x` into the cache, `depmod -b` (the package ships
// no modules.dep; its postinst would run depmod), and the uncompressed PVH vmlinux
// extracted from the bzImage. The cache is a store.Layout's Kernels() directory: one
// <release> directory per kernel, laid out as package store describes.
//
// Privilege: fetching into the artifact store needs root (it is root-owned); linked only
// into broodd-helper and tests, never into brood.
package kernel

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/hostexec"
	"brood.dev/brood/sandbox/store"
)

// MetaPackage is the Debian metapackage that depends on the current generic amd64
// kernel ABI package.
const MetaPackage = "linux-image-amd64"

// Kernel is an unpacked guest kernel in the cache.
type Kernel struct {
	Release    string // uname -r of the guest, e.g. "6.1.0-57-amd64"
	Dir        string // the cache directory of this release
	Vmlinux    string // uncompressed ELF kernel with the PVH entry
	ModulesDir string // lib/modules/<Release> with a generated modules.dep
}

// ParseDepends returns the kernel ABI package (linux-image-<abi>-amd64) among the
// "Depends:" lines of `apt-cache depends linux-image-amd64`.
func ParseDepends(out []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		v = strings.TrimSpace(v)
		if ok && k == "Depends" && strings.HasPrefix(v, "linux-image-") && v != MetaPackage {
			return v, nil
		}
	}
	return "", fmt.Errorf("apt-cache depends %s: %w", MetaPackage, ErrNoPackage)
}

// ResolvePackage asks apt which ABI package the metapackage currently depends on,
// e.g. "linux-image-6.1.0-57-amd64".
func ResolvePackage(ctx context.Context) (string, error) {
	cmd, err := hostexec.Command(ctx, "apt-cache", "depends", MetaPackage)
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w", MetaPackage, err)
	}
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("apt-cache depends %s: %w", MetaPackage, err)
	}
	return ParseDepends(out)
}

// Release returns the kernel release a package installs, e.g. "6.1.0-57-amd64" for
// "linux-image-6.1.0-57-amd64".
func Release(pkg string) (string, error) {
	rel, ok := strings.CutPrefix(pkg, "linux-image-")
	if !ok || !store.ValidRelease(rel) {
		return "", fmt.Errorf("package %q is not a linux-image-<release>: %w", pkg, ErrNoPackage)
	}
	return rel, nil
}

// Open returns the cached kernel of release under cacheDir, or an error wrapping
// fs.ErrNotExist when it was never fetched completely.
func Open(cacheDir, release string) (*Kernel, error) {
	dir := filepath.Join(cacheDir, release)
	if _, err := os.Stat(filepath.Join(dir, store.ReadyName)); err != nil {
		return nil, fmt.Errorf("open kernel %s: %w", release, err)
	}
	return &Kernel{
		Release:    release,
		Dir:        dir,
		Vmlinux:    filepath.Join(dir, store.VmlinuxName),
		ModulesDir: filepath.Join(dir, "root", "lib", "modules", release),
	}, nil
}

// Fetch returns the kernel of package pkg (empty: ResolvePackage) from the cache under
// cacheDir, downloading and unpacking it first when it is not there. Concurrent
// fetches are serialized by a lock file; a half-done fetch never looks complete.
// It needs apt-get, dpkg-deb, depmod and xz on $PATH, and ~500 MB of disk.
func Fetch(ctx context.Context, cacheDir, pkg string) (*Kernel, error) {
	if pkg == "" {
		var err error
		if pkg, err = ResolvePackage(ctx); err != nil {
			return nil, err
		}
	}
	rel, err := Release(pkg)
	if err != nil {
		return nil, err
	}
	if k, err := Open(cacheDir, rel); err == nil {
		return k, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return nil, fmt.Errorf("create kernel cache: %w", err)
	}
	unlock, err := lock(filepath.Join(cacheDir, ".lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()
	if k, err := Open(cacheDir, rel); err == nil { // fetched while we waited
		return k, nil
	}
	tmp, err := os.MkdirTemp(cacheDir, ".fetch-"+rel+"-")
	if err != nil {
		return nil, fmt.Errorf("fetch kernel %s: %w", rel, err)
	}
	defer os.RemoveAll(tmp)
	if err := unpack(ctx, tmp, pkg, rel); err != nil {
		return nil, fmt.Errorf("fetch kernel %s: %w", rel, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil { // MkdirTemp made it 0700
		return nil, fmt.Errorf("fetch kernel %s: %w", rel, err)
	}
	dir := filepath.Join(cacheDir, rel)
	if err := os.RemoveAll(dir); err != nil { // an incomplete earlier attempt
		return nil, fmt.Errorf("fetch kernel %s: %w", rel, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return nil, fmt.Errorf("fetch kernel %s: %w", rel, err)
	}
	return Open(cacheDir, rel)
}

// unpack downloads pkg into dir, extracts it to dir/root, runs depmod and writes
// dir/vmlinux, then the ready marker.
func unpack(ctx context.Context, dir, pkg, rel string) error {
	if err := run(ctx, dir, "apt-get", "download", pkg); err != nil {
		// Stale package lists name a version the mirror no longer has; root can
		// refresh them once.
		if os.Geteuid() != 0 {
			return err
		}
		if uerr := run(ctx, dir, "apt-get", "update", "-qq"); uerr != nil {
			return fmt.Errorf("%w (and %w)", err, uerr)
		}
		if err := run(ctx, dir, "apt-get", "download", pkg); err != nil {
			return err
		}
	}
	debs, _ := filepath.Glob(filepath.Join(dir, pkg+"_*.deb"))
	if len(debs) != 1 {
		return fmt.Errorf("apt-get download %s left %d .deb files", pkg, len(debs))
	}
	root := filepath.Join(dir, "root")
	if err := run(ctx, dir, "dpkg-deb", "-x", debs[0], root); err != nil {
		return err
	}
	if err := os.Remove(debs[0]); err != nil {
		return err
	}
	if err := run(ctx, dir, "depmod", "-b", root, rel); err != nil {
		return err
	}
	bz, err := os.ReadFile(filepath.Join(root, "boot", "vmlinuz-"+rel))
	if err != nil {
		return err
	}
	vml, err := Vmlinux(ctx, bz)
	if err != nil {
		return fmt.Errorf("extract vmlinux: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, store.VmlinuxName), vml, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, store.ReadyName), []byte(pkg+"\n"), 0o644)
}

// run runs a tool in dir (a brood-owned directory) and folds its output into the error.
func run(ctx context.Context, dir, name string, args ...string) error {
	cmd, err := hostexec.Command(ctx, name, args...)
	if err != nil {
		return fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// lock takes an exclusive flock on path and returns its release.
func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open lock: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
		f.Close()
		return nil, &os.PathError{Op: "flock", Path: path, Err: err}
	}
	return func() { f.Close() }, nil
}
