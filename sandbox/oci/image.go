package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"brood.dev/brood/sandbox/image"
	"brood.dev/brood/sandbox/store"
)

// ImageName is the store image name of the pulled image with digest ("sha256:<hex>",
// what a reference pins, Pulled.Digest): "oci-" and the digest's first store.DigestLen
// hex digits. The image file is then store.ImageFile(ImageName(d), treeDigest), so a
// configuration naming REGISTRY/REPO@sha256:<hex> finds its image without the network.
func ImageName(digest string) (string, error) {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || !digestRe.MatchString(digest) {
		return "", fmt.Errorf("image digest %q: not sha256:<64 hex digits>", digest)
	}
	n := "oci-" + hex[:store.DigestLen]
	if !store.ValidImageName(n) {
		return "", fmt.Errorf("image digest %q: no valid image name", digest)
	}
	return n, nil
}

// RefImageName is the store image name of ref, a digest reference
// ("REGISTRY/REPO@sha256:<hex>"): ImageName of its digest, found without the network. A
// tag reference has no name until it is pulled (Pull resolves it; use Pulled.Digest).
func RefImageName(ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	d, ok := r.(name.Digest)
	if !ok {
		return "", fmt.Errorf("image reference %q: a tag names no stored image; pull it and use its digest", ref)
	}
	return ImageName(d.DigestStr())
}

// PullImage pulls ref (see Pull) into a work directory under imagesDir (a store.Layout's
// Images()), makes its image there with image.FromDir and removes the tree. It returns
// the image file's path and what was pulled.
func PullImage(ctx context.Context, ref, imagesDir string, o Options) (string, *Pulled, error) {
	if err := os.MkdirAll(imagesDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("create image cache: %w", err)
	}
	work, err := os.MkdirTemp(imagesDir, ".pull-")
	if err != nil {
		return "", nil, fmt.Errorf("pull image %s: %w", ref, err)
	}
	defer os.RemoveAll(work)
	tree := filepath.Join(work, "rootfs")
	p, err := Pull(ctx, ref, tree, o)
	if err != nil {
		return "", nil, err
	}
	n, err := ImageName(p.Digest)
	if err != nil {
		return "", nil, err
	}
	img, err := image.FromDir(ctx, imagesDir, n, tree)
	if err != nil {
		return "", nil, fmt.Errorf("image of %s: %w", p.Pinned(), err)
	}
	return img, p, nil
}
