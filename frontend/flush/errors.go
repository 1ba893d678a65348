package flush

import "errors"

// Errors returned by this package (wrapped with the operation and path), checked with
// errors.Is. Per-path errors are also reported in Result.Problems.
var (
	// ErrUnsafePath: a path is empty, absolute, has an empty, "." or ".." component, a NUL
	// or control byte, is too long, or a component of it is (or became) a symlink or
	// resolves outside the workspace (openat2 ELOOP/EXDEV under RESOLVE_BENEATH |
	// RESOLVE_NO_SYMLINKS).
	ErrUnsafePath = errors.New("unsafe path")
	// ErrSymlinkTarget: a symlink in S points to an absolute path or outside the workspace.
	ErrSymlinkTarget = errors.New("symlink target not allowed")
	// ErrRefused: the change is of kind refused, is a special file, or cannot be flushed.
	ErrRefused = errors.New("change refused")
	// ErrConflict: the change is of kind conflict, or the workspace no longer matches the
	// base recorded at snapshot time (or a path that was absent now exists).
	ErrConflict = errors.New("workspace changed since the snapshot")
	// ErrNoReviewedHash: a regular-file change carries neither NewHash nor Content.
	ErrNoReviewedHash = errors.New("no reviewed hash for new content")
	// ErrHashMismatch: the bytes written differ from the reviewed hash.
	ErrHashMismatch = errors.New("content does not match the reviewed hash")
	// ErrMetadata: an extended attribute (or ACL) of the file a change replaces cannot be
	// set on the new file here, and Options.DropMetadata was not given; or setting one
	// failed while writing.
	ErrMetadata = errors.New("extended attribute cannot be kept")
	// ErrChangedSinceApply: undo found a workspace path that is neither what the apply
	// wrote nor what it replaced; nothing is reverted.
	ErrChangedSinceApply = errors.New("workspace changed since the apply")
	// ErrNotInApply: a path given to UndoExcept was not changed by the apply being undone.
	ErrNotInApply = errors.New("path not changed by this apply")
	// ErrNothingToUndo: the session has no apply that is not already undone.
	ErrNothingToUndo = errors.New("nothing to undo")
	// ErrInterrupted: an earlier apply of this session was interrupted; call Recover first.
	ErrInterrupted = errors.New("an interrupted apply must be recovered first")
	// ErrBusy: another apply, undo or recover holds the session's journal lock.
	ErrBusy = errors.New("another apply or undo of this session is running")
	// ErrJournal: a journal record is unreadable or of an unknown version.
	ErrJournal = errors.New("corrupt flush journal")
)
