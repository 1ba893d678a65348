// Package ociref is what both brood and broodd-helper need to know about OCI image
// references without pulling anything: whether a string is a reference or an image name
// (IsReference), the store image name a digest reference maps to (ImageName,
// RefImageName), and the system policy's image rules (Policy: require_digests,
// allowed_images, on_demand_builds). It parses references with go-containerregistry's
// name package only (no registry client, no tar code), so the CLI can map
// `image = "REGISTRY/REPO@sha256:…"` to a stored image offline.
//
// Privilege: none; pure functions, linked by brood, broodd-helper and package oci.
package ociref

import (
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"

	"brood.dev/brood/sandbox/store"
)

// ErrPolicy: the system policy refuses the reference (digest required, not in
// allowed_images). The error names the reference and the rule.
var ErrPolicy = errors.New("refused by the image policy")

// ErrTag: a tag reference where only a digest names a stored image.
var ErrTag = errors.New("a tag names no stored image")

// IsReference reports whether s is meant as an OCI reference rather than an image
// name: image names (store.ValidImageName) have no '/', ':' or '@'.
func IsReference(s string) bool { return strings.ContainsAny(s, "/:@") }

// ImageName is the store image name of the pulled image with digest ("sha256:<hex>",
// what a reference pins): "oci-" and the digest's first store.DigestLen hex digits. The
// image file is then store.ImageFile(ImageName(d), treeDigest), so a configuration
// naming REGISTRY/REPO@sha256:<hex> finds its image without the network.
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
// tag reference has no name until it is pulled: the error wraps ErrTag and says to run
// `brood image pull REF` and use the digest reference it prints.
func RefImageName(ref string) (string, error) {
	r, err := name.ParseReference(ref)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", ref, err)
	}
	d, ok := r.(name.Digest)
	if !ok {
		return "", fmt.Errorf("image reference %q: %w; pull it first (brood image pull %s) and use the REGISTRY/REPO@sha256:... reference it prints",
			ref, ErrTag, ref)
	}
	return ImageName(d.DigestStr())
}
