package oci

import (
	"errors"
	"fmt"

	"brood.dev/brood/sandbox/ociref"
)

// Sentinel errors of package oci; check them with errors.Is.
var (
	// ErrPolicy: the system policy refuses the reference (digest required, not in
	// allowed_images); it is ociref.ErrPolicy, where the policy lives.
	ErrPolicy = ociref.ErrPolicy
	// ErrPlatform: the reference has no image for the wanted platform (linux/GOARCH).
	ErrPlatform = errors.New("no image for this platform")
	// ErrDigest: a layer's uncompressed content does not match the diff ID its image
	// configuration records (blob digests are verified by go-containerregistry).
	ErrDigest = errors.New("layer digest mismatch")
	// ErrUnsafePath: an entry name or link target that is absolute, has a ".."
	// component, a NUL byte, is too long, or names the tree root where that is meaningless.
	ErrUnsafePath = errors.New("unsafe path in layer")
	// ErrSymlinkPath: an entry would be written through a symlink (a parent component is
	// a symlink, in this layer or a lower one).
	ErrSymlinkPath = errors.New("path passes through a symlink")
	// ErrNotDir: an entry's parent component exists and is not a directory.
	ErrNotDir = errors.New("parent is not a directory")
	// ErrHardlink: a hardlink whose target is not an existing file or symlink of the tree.
	ErrHardlink = errors.New("hardlink target not in the tree")
	// ErrDuplicate: one layer holds the same path twice (other than a directory twice).
	ErrDuplicate = errors.New("duplicate entry in layer")
	// ErrLimit: a cap of Limits (entries, file size, total size, layers) would be exceeded.
	ErrLimit = errors.New("layer exceeds a limit")
	// ErrUnsupported: a tar entry type that has no place in an image.
	ErrUnsupported = errors.New("unsupported tar entry")
)

// EntryError is the error of one layer entry: the layer's digest (or name) and the
// entry's path as the tar stream gives it.
type EntryError struct {
	Layer string // "sha256:<hex>", or the name a caller gave Tree.Apply
	Entry string // the tar header's name, unmodified
	Err   error  // wraps one of the sentinels above, or a syscall error
}

func (e *EntryError) Error() string {
	return fmt.Sprintf("layer %s entry %q: %v", e.Layer, e.Entry, e.Err)
}

func (e *EntryError) Unwrap() error { return e.Err }
