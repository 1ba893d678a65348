package cli

import (
	"strings"

	"brood.dev/brood/helper/api"
	"brood.dev/brood/sandbox/ociref"
)

// storeImage is the store image name s stands for wherever an image is accepted (an
// agent's `image` in the user config, --image, run-image's IMAGE): an image name as it
// is, a digest reference (REGISTRY/REPO@sha256:<hex>) mapped offline to the name its
// pull stored it under (ociref.RefImageName). A tag reference is refused with the
// command that pulls it and prints the digest reference to use. Errors are usage
// errors starting with op.
func storeImage(op, s string) (string, error) {
	if !ociref.IsReference(s) {
		if !api.ValidImageName(s) {
			return "", usageErr("%s: %q is not an image name (see brood image list) or an OCI reference REGISTRY/REPO@sha256:<hex>", op, s)
		}
		return s, nil
	}
	n, err := ociref.RefImageName(s)
	if err != nil {
		return "", usageErr("%s: %v", op, err)
	}
	return n, nil
}

// refOf is s when it is an OCI reference (storeImage accepted it: a digest reference),
// else "".
func refOf(s string) string {
	if ociref.IsReference(s) {
		return s
	}
	return ""
}

// pullCommand is what pulls ref into the helper's store: the privileged binary, as root.
func pullCommand(ref string) string { return "sudo broodd-helper image pull " + ref }

// isPulledName reports whether the store image name n was made by a pull (ociref.ImageName).
func isPulledName(n string) bool { return strings.HasPrefix(n, "oci-") }
