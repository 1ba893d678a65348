package store

import (
	"errors"
	"io/fs"
)

// Sentinel errors of package store, checked with errors.Is.
var (
	// ErrUnsafe reports a store entry (or a directory above it) that is a symlink, has
	// the wrong file type, is not owned by root, or is writable by group or others.
	ErrUnsafe = errors.New("unsafe VM artifact")
	// ErrMissing reports an entry that does not exist (also matches fs.ErrNotExist).
	ErrMissing = missing{}
)

type missing struct{}

func (missing) Error() string        { return "VM artifact missing" }
func (missing) Is(target error) bool { return target == fs.ErrNotExist }
