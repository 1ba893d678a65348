// Package assets finds or builds everything a brood VM boots from — the guest kernel,
// the base initramfs with brood-guest, and the rootfs image — and turns them plus a
// session's guest configuration into a sandbox.Spec. It is the one call that fills the
// artifact store (package store): `broodd-helper image build` and the real-VM tests
// (sandbox/vmtest) call Ensure; the helper's daemon opens the built artifacts through
// store's trusted opener. The pieces live in packages kernel, initramfs and image.
//
// Privilege: root, to write the root-owned store; linked only into broodd-helper (its
// image subcommand) and tests, never into brood (frontend/deps_test.go).
package assets

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"brood.dev/brood/sandbox"
	"brood.dev/brood/sandbox/guestcfg"
	"brood.dev/brood/sandbox/image"
	"brood.dev/brood/sandbox/initramfs"
	"brood.dev/brood/sandbox/kernel"
	"brood.dev/brood/sandbox/store"
)

// GuestPaths are where packaged installs put brood-guest, in search order.
var GuestPaths = []string{"/usr/libexec/brood/brood-guest", "/usr/lib/brood/brood-guest"}

// FindGuest returns the static brood-guest binary: $BROOD_GUEST, then GuestPaths, then
// brood-guest next to the running executable.
func FindGuest() (string, error) {
	cands := append([]string{}, GuestPaths...)
	if p := os.Getenv("BROOD_GUEST"); p != "" {
		cands = append([]string{p}, cands...)
	}
	if exe, err := os.Executable(); err == nil {
		cands = append(cands, filepath.Join(filepath.Dir(exe), "brood-guest"))
	}
	for _, p := range cands {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
	}
	return "", fmt.Errorf("search %v: %w", cands, ErrNoGuest)
}

// Options select the assets.
type Options struct {
	// Store is where they live; the zero Layout means store.New("") (/var/lib/brood).
	Store store.Layout
	// Guest is the brood-guest binary; empty means FindGuest.
	Guest string
	// Image is the rootfs image recipe name (image.Recipes), e.g. "test" or "codex".
	Image string
	// BuildImage builds the image when it is not cached; otherwise a missing image
	// is an error wrapping fs.ErrNotExist (`broodd-helper image build NAME` builds it).
	BuildImage bool
	// Rebuild builds the image of the recipe as it is now even when an older image of
	// that name is cached (an unchanged recipe keeps its image and runs nothing: the
	// file is named by the recipe's key); implies BuildImage.
	Rebuild bool
	// KernelPackage pins the kernel package; empty means what linux-image-amd64
	// depends on now (resolved through apt on first use).
	KernelPackage string
	// Log receives image build progress; nil discards it.
	Log io.Writer
	// Phase, when set, is called as each step starts: "kernel", "initramfs", "image".
	Phase func(phase string)
}

// phase reports the start of step p to o.Phase.
func (o Options) phase(p string) {
	if o.Phase != nil {
		o.Phase(p)
	}
}

// Set is what a VM boots from.
type Set struct {
	Kernel    *kernel.Kernel
	Initramfs string // base initramfs, without a session
	Image     string // rootfs image
}

// Ensure returns the assets for o from o.Store, fetching the kernel and building the
// initramfs (and, with o.BuildImage or o.Rebuild, the image) when they are not there.
func Ensure(ctx context.Context, o Options) (*Set, error) {
	l := o.Store
	if l.Root == "" {
		l = store.New("")
	}
	guest := o.Guest
	if guest == "" {
		var err error
		if guest, err = FindGuest(); err != nil {
			return nil, err
		}
	}
	kdir := l.Kernels()
	o.phase("kernel")
	var k *kernel.Kernel
	var err error
	if o.KernelPackage == "" {
		// Reuse any cached kernel before asking apt (which may be offline).
		k, err = newestKernel(kdir)
	}
	if k == nil {
		if k, err = kernel.Fetch(ctx, kdir, o.KernelPackage); err != nil {
			return nil, err
		}
	}
	o.phase("initramfs")
	initrd, err := initramfs.Build(l.Initramfs(k.Release), initramfs.Options{
		Release: k.Release, ModulesDir: k.ModulesDir, Guest: guest,
	})
	if err != nil {
		return nil, err
	}
	idir := l.Images()
	o.phase("image")
	var img string
	switch {
	case o.Rebuild:
		img, err = image.Build(ctx, idir, o.Image, o.Log)
	case o.BuildImage:
		img, err = image.Ensure(ctx, idir, o.Image, o.Log)
	default:
		img, err = image.Cached(idir, o.Image)
	}
	if err != nil {
		return nil, err
	}
	return &Set{Kernel: k, Initramfs: initrd, Image: img}, nil
}

// newestKernel returns a cached kernel, or nil when there is none.
func newestKernel(dir string) (*kernel.Kernel, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil
	}
	for i := len(ents) - 1; i >= 0; i-- {
		if k, err := kernel.Open(dir, ents[i].Name()); err == nil {
			return k, nil
		}
	}
	return nil, nil
}

// Spec writes the session initramfs (the base plus cfg, mode 0600: it holds the
// session's SSH host key) into runDir and returns a default Spec booting it, with the
// SSH socket at runDir/ssh.sock and share as /workspace (empty: none).
func (s *Set) Spec(runDir string, cfg guestcfg.Config, share string) (sandbox.Spec, error) {
	files, err := initramfs.SessionFiles(cfg)
	if err != nil {
		return sandbox.Spec{}, err
	}
	initrd := filepath.Join(runDir, "initramfs.img")
	if err := initramfs.WithSession(s.Initramfs, initrd, files); err != nil {
		return sandbox.Spec{}, err
	}
	spec := sandbox.NewSpec(s.Kernel.Vmlinux, initrd, filepath.Join(runDir, "ssh.sock"), share)
	spec.RootfsImage = s.Image
	return spec, nil
}
