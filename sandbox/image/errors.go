package image

import "errors"

// Sentinel errors of package image; check them with errors.Is.
var (
	// ErrUnknownRecipe is returned by Build for an image name with no recipe.
	ErrUnknownRecipe = errors.New("unknown image recipe")
)
