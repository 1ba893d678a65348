// Package flush writes reviewed changes from a session's snapshot S back into the
// workspace W, journaled so that every apply can be undone and an interrupted apply can be
// rolled back.
//
// Apply works in three phases:
//
//  1. Plan (reads only): validate every path (ValidatePath), refuse kinds refused and
//     conflict, symlinks whose target is absolute or leaves W, and special files; check that
//     each W target still matches the base recorded in the manifest (stat, else content
//     digest, package digest, against Change.OldHash) or, for an added path, is still absent.
//  2. Journal: write the plan (prior and new state of every path) and keep the prior
//     content (a hard link to the replaced inode, or a copy on another filesystem) in the
//     session's journal directory; fsync all of it before W is touched.
//  3. Write: remove deleted entries (their inodes stay in the journal), create missing
//     directories with mkdirat, write each new file to a temp file in its target
//     directory, fsync, verify the content digest of what was written against the reviewed one,
//     re-check that the target is the very entry checked in phase 1, rename it into place
//     with renameat2 (RENAME_NOREPLACE for added paths), set modes with fchmod (always
//     masked with 0777) and fsync each touched directory once. Files are reflinked
//     from S where the filesystem can, else copied with their holes; a replaced file's
//     inode flags (flagRules), extended attributes and ACL (xattrRules) are set on the
//     temp file before its mode and before the rename (one that cannot be set is refused
//     in phase 1, where an unnamed O_TMPFILE probe shows it, unless
//     Options.DropMetadata; an immutable or append-only file is always refused there).
//
// Every W path is resolved from W's root fd with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS), so a directory swapped for a symlink makes the write fail with
// ErrUnsafePath instead of leaving W. New files belong to the invoking user, with the
// group a new file gets in their directory (as with cp); a modified file keeps its group
// when the user may set it (and its owner under root), see keepOwner. A kill at any point leaves every path old or new (rename is atomic);
// Recover (or Undo) rolls an interrupted apply back from the journal.
//
// Privilege: none; it runs in brood as the developer and writes only W and the session's
// journal.
package flush

import (
	"context"
	"errors"
	"fmt"
	"time"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
)

// Item is one reviewed change to flush.
type Item struct {
	Change diff.Change
	// Content is nil to take S's file as it is (its content digest must equal Change.NewHash), or
	// the exact bytes to write (a hunk selection or a merge result), which are then the
	// reviewed content. Content is only valid for regular files.
	Content []byte
}

// Options tune Apply. The zero value is the default.
type Options struct {
	// Workers is the number of files written in parallel (default 4).
	Workers int
	// DropMetadata applies a change even when an extended attribute or ACL of the file it
	// replaces cannot be set on the new file (MetaLoss.Refused); each such attribute is
	// listed in Result.Dropped. Without it such a change is refused with ErrMetadata
	// before anything is written.
	DropMetadata bool
}

// Problem is one path that was not applied (or not reverted) and why. Err wraps one of
// the package's sentinel errors and names the path.
type Problem struct {
	Path string
	Err  error
}

func (p Problem) Error() string { return p.Err.Error() }

// Result reports what Apply, Undo or Recover did.
type Result struct {
	Tx       string    // journal transaction ("000001", …); "" when nothing was journaled
	Applied  []string  // paths changed in W (reverted, for Undo and Recover), in order
	Kept     []string  // UndoExcept: paths of the apply left as they are now, in order
	Problems []Problem // paths left alone, with the reason
	// Dropped: extended attributes of replaced files that the applied files did not get
	// (never carried over by rule, or refused here and dropped by Options.DropMetadata).
	Dropped []MetaLoss
}

// err returns nil or the problems joined (each names its path and wraps a sentinel).
func (r *Result) err() error {
	if len(r.Problems) == 0 {
		return nil
	}
	errs := make([]error, len(r.Problems))
	for i, p := range r.Problems {
		errs[i] = p.Err
	}
	return errors.Join(errs...)
}

// CheckMetadata plans items as Apply would, reading only (the probes of what W's
// filesystem accepts are unnamed O_TMPFILE files), and returns every extended attribute of
// a replaced file that the new file would not get, in path order: the ones never carried
// over, and (Refused) the ones Apply refuses to lose without Options.DropMetadata. Items
// that could not be applied for another reason are not reported here; Apply reports them.
func CheckMetadata(sess *session.Session, m *manifest.Manifest, items []Item) ([]MetaLoss, error) {
	ws := sess.Workspace
	if ws == "" && m != nil {
		ws = m.Workspace
	}
	a, err := newApplier(ws, sess.SnapshotDir(), m, Options{DropMetadata: true})
	if err != nil {
		return nil, err
	}
	defer a.close()
	var res Result
	var out []MetaLoss
	for _, o := range a.plan(items, &res) {
		out = append(out, o.lost...)
	}
	return out, nil
}

// testHook, when set by tests, is called at named points of an apply (plan, journal,
// staged, renamed, committed) with a counter; tests use it to kill the process or to race
// the workspace.
var testHook func(point string, n int)

func hook(point string, n int) {
	if testHook != nil {
		testHook(point, n)
	}
}

// Apply flushes items into the session's workspace (sess.Workspace) from its snapshot
// (sess.SnapshotDir()), checking W against the base in m. Items of kind refused or
// conflict are never applied; each change stands alone (applying a rename's add never
// deletes the other path). Paths that cannot be applied are reported in Result.Problems
// and the returned error joins them; the rest is applied. It returns ErrInterrupted if an
// earlier apply of the session was interrupted (call Recover first) and ErrBusy if
// another apply or undo runs. ctx is checked until the workspace is first touched.
func Apply(ctx context.Context, sess *session.Session, m *manifest.Manifest, items []Item, opts Options) (Result, error) {
	var res Result
	j, err := openJournal(sess.JournalDir())
	if err != nil {
		return res, err
	}
	defer j.close()
	if pend, err := j.interrupted(); err != nil {
		return res, err
	} else if len(pend) > 0 {
		return res, fmt.Errorf("apply session %s (tx %s): %w", sess.ID, pend[0], ErrInterrupted)
	}
	ws := sess.Workspace
	if ws == "" && m != nil {
		ws = m.Workspace
	}
	a, err := newApplier(ws, sess.SnapshotDir(), m, opts)
	if err != nil {
		return res, err
	}
	defer a.close()

	ops := a.plan(items, &res)
	hook("plan", len(ops))
	if len(ops) == 0 {
		return res, res.err()
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("apply session %s: %w", sess.ID, err)
	}
	tx, err := j.nextTx()
	if err != nil {
		return res, err
	}
	res.Tx = tx
	rec := &record{Version: journalVersion, Tx: tx, Workspace: ws, Created: time.Now().UnixNano()}
	if err := a.journal(j, rec, ops); err != nil {
		return res, err
	}
	if err := ctx.Err(); err != nil {
		// Nothing was touched: mark the tx undone so it is not taken for an interrupted one.
		writeFileSync(j.txDir(tx), undoneName, nil)
		return res, fmt.Errorf("apply session %s: %w", sess.ID, err)
	}
	done, err := a.write(ops)
	if err != nil {
		return res, err
	}
	seen := map[string]bool{}
	for _, i := range done {
		if p := ops[i].Path; !ops[i].Implicit && !seen[p] {
			seen[p] = true
			res.Applied = append(res.Applied, p)
		}
		res.Dropped = append(res.Dropped, ops[i].lost...)
	}
	for _, o := range ops {
		if o.err != nil {
			res.Problems = append(res.Problems, Problem{Path: o.Path, Err: o.err})
		}
	}
	if err := writeFileSync(j.txDir(tx), doneName, &doneRecord{Done: done}); err != nil {
		return res, err
	}
	hook("committed", len(done))
	if sess.State != session.StateApplied && len(done) > 0 {
		if err := sess.SetState(session.StateApplied); err != nil {
			return res, err
		}
	}
	return res, res.err()
}
