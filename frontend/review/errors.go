package review

import "errors"

// Errors returned by this package, checked with errors.Is.
var (
	// ErrNotRegular: the path is not a regular file in that tree (missing, symlink, dir...).
	ErrNotRegular = errors.New("not a regular file")
	// ErrTooLarge: the file is larger than the display limit (MaxTextBytes).
	ErrTooLarge = errors.New("file too large to display")
	// ErrNoBase: the snapshot kept no base copy of the file (no three-way merge possible).
	ErrNoBase = errors.New("no base copy")
	// ErrBaseMismatch: the base copy no longer has the hash recorded at snapshot time.
	ErrBaseMismatch = errors.New("base copy does not match the snapshot digest")
	// ErrChanged: a file no longer has the content digest the diff recorded for it.
	ErrChanged = errors.New("file changed since the diff")
	// ErrAborted: the developer aborted the review (Ctrl-C, Ctrl-D, end of input, or
	// declined the final confirmation); nothing was applied.
	ErrAborted = errors.New("review aborted")
	// ErrUnknownPath: a path named on the command line is not among the changes.
	ErrUnknownPath = errors.New("no such change")
)
