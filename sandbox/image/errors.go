package image

import "errors"

// Sentinel errors of package image; check them with errors.Is.
var (
	// ErrUnknownRecipe is returned by Build for an image name with no recipe.
	ErrUnknownRecipe = errors.New("unknown image recipe")
	// ErrUnpinned is returned for an agent recipe whose pins lack a version or an
	// integrity hash; Build refuses to fetch such a package.
	ErrUnpinned = errors.New("agent package not pinned by version and hash")
)
