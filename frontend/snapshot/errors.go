package snapshot

import "errors"

// Errors returned by Take (wrapped with the path concerned), checked with errors.Is.
var (
	// ErrChanged: an entry of W changed type or identity between being listed and being
	// opened (for example a directory swapped for a symlink). Nothing was followed; retry.
	ErrChanged = errors.New("workspace changed during the snapshot")
	// ErrNotDir: the workspace is not a directory.
	ErrNotDir = errors.New("workspace is not a directory")
	// ErrBadRule: an extra secret rule is not a valid path.Match pattern.
	ErrBadRule = errors.New("invalid secret rule")
)
