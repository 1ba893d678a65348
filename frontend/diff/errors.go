package diff

import "errors"

// Errors returned by this package, checked with errors.Is. Path validation errors are
// wrapped with the offending path already escaped (see Escape).
var (
	// ErrEmptyPath: a path is "" (the root itself is never an entry).
	ErrEmptyPath = errors.New("empty path")
	// ErrEscapesRoot: an absolute path, or a component "", "." or "..".
	ErrEscapesRoot = errors.New("path escapes the root")
	// ErrControlByte: a name holds a control byte (C0, DEL, C1) or a bidirectional or
	// invisible formatting character that can make a terminal line lie.
	ErrControlByte = errors.New("control character in name")
	// ErrNUL: a path holds a NUL byte (no file system allows it; a forged manifest might).
	ErrNUL = errors.New("NUL byte in path")
	// ErrNotRegular: HashFile was asked to hash something that is not a regular file.
	ErrNotRegular = errors.New("not a regular file")
	// ErrChanged: a file changed between the stat walk and the read (W being edited).
	ErrChanged = errors.New("file changed while it was read")
	// ErrTooLarge: ReadFile's size limit was exceeded.
	ErrTooLarge = errors.New("file too large")
	// ErrNoManifest: Compute was called with a nil manifest.
	ErrNoManifest = errors.New("no manifest")
)
