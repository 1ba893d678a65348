package helper

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox/store"
)

// The helper boots only what the artifact store under Config.StateDir holds (package
// store: the layout, and the trusted opener that opens every component with O_NOFOLLOW
// and requires root-owned entries not writable by group or others). It never opens a
// path a client names: an image is chosen by a validated name.

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

// storeOf is the artifact store of cfg.
func storeOf(cfg *Config) store.Layout { return store.New(cfg.StateDir) }

// openArtifacts opens the kernel (cfg.KernelRelease, or the newest complete one), its
// base initramfs (cfg.Initramfs, or the newest) and the newest image called imageName.
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
	if a.Image, err = storeOf(cfg).OpenImage(imageName); err != nil {
		a.Close()
		return nil, fmt.Errorf("image %q: %w", imageName, artifactErr(err))
	}
	return a, nil
}

// openArtifactsNoImage opens the kernel and initramfs like openArtifacts.
func openArtifactsNoImage(cfg *Config) (*artifacts, error) {
	b, err := storeOf(cfg).OpenBoot(cfg.KernelRelease, cfg.Initramfs)
	if err != nil {
		return nil, artifactErr(err)
	}
	return &artifacts{Release: b.Release, Kernel: b.Kernel, Initrd: b.Initramfs}, nil
}

// artifactErr adds the protocol's meaning to a store error: a missing entry is
// api.ErrUnavailable (build it), an unsafe one stays ErrUnsafeArtifact.
func artifactErr(err error) error {
	if errors.Is(err, store.ErrMissing) {
		return fmt.Errorf("%w: %w", api.ErrUnavailable, err)
	}
	return err
}

// listImages returns the images the helper boots (store.Layout.ListImages).
func listImages(cfg *Config) ([]api.Image, error) {
	imgs, err := storeOf(cfg).ListImages()
	if err != nil {
		return nil, artifactErr(err)
	}
	out := make([]api.Image, 0, len(imgs))
	for _, im := range imgs {
		out = append(out, api.Image{Name: im.Name, File: im.File, Digest: im.Digest, Size: im.Size, Built: im.ModTime.Unix()})
	}
	return out, nil
}

// builtImages lists the names of the images openArtifacts would find, sorted; an empty
// list when there are none or the directory cannot be read safely.
func builtImages(cfg *Config) []string {
	out := []string{}
	imgs, _ := storeOf(cfg).ListImages()
	for _, im := range imgs {
		out = append(out, im.Name)
	}
	return out
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
	var files []string
	imgs, _ := storeOf(cfg).ListImages()
	for _, im := range imgs {
		files = append(files, im.File)
	}
	c.OK = len(files) > 0
	c.Detail = fmt.Sprintf("kernel %s, initramfs %s, images %v", a.Release, filepath.Base(a.Initrd.Name()), files)
	return c
}
