package oci

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"brood.dev/brood/sandbox/image"
	"brood.dev/brood/sandbox/ociref"
)

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
	n, err := ociref.ImageName(p.Digest)
	if err != nil {
		return "", nil, err
	}
	img, err := image.FromDir(ctx, imagesDir, n, tree)
	if err != nil {
		return "", nil, fmt.Errorf("image of %s: %w", p.Pinned(), err)
	}
	return img, p, nil
}
