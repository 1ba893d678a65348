package assets

import "errors"

// Sentinel errors of package assets; check them with errors.Is.
var (
	// ErrNoGuest is returned by FindGuest when no brood-guest binary is installed.
	ErrNoGuest = errors.New("brood-guest binary not found")
)
