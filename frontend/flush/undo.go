package flush

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
)

// Undo reverts the latest apply of the session that is not undone yet, from its journal:
// deleted and replaced files get their prior inode (or a verified copy, with its holes)
// back with exactly the extended attributes and ACL recorded in the journal, created
// entries are removed, modes are restored exactly. If any path the apply changed is now
// neither what the apply wrote nor what it replaced, Undo changes nothing and returns
// ErrChangedSinceApply naming each such path. Undo is idempotent: a path already back
// in its prior state is skipped, so an interrupted undo is completed by running it
// again. An interrupted apply is rolled back as by Recover. It returns ErrNothingToUndo
// when every apply is already undone. When no apply remains in effect, the session's
// state goes back from applied (to stopped if a VM ever ran on it, else ready).
func Undo(ctx context.Context, sess *session.Session) (Result, error) {
	return UndoExcept(ctx, sess, nil)
}

// UndoExcept is Undo that leaves the paths in except (workspace-relative, '/'-separated)
// as they are now, with everything below them and the directories the apply created
// above them: the way forward when the developer changed some paths after the apply and
// wants the rest reverted. Only the other paths are checked and reverted; the apply then
// counts as undone (Result.Kept lists the paths left). A path in except that the apply
// did not change is ErrNotInApply, and nothing is reverted.
func UndoExcept(ctx context.Context, sess *session.Session, except []string) (Result, error) {
	var res Result
	j, err := openJournal(sess.JournalDir())
	if err != nil {
		return res, err
	}
	defer j.close()
	pend, err := j.interrupted()
	if err != nil {
		return res, err
	}
	if len(pend) > 0 {
		return recoverTxs(ctx, j, sess, pend)
	}
	tx, err := latestApplied(j)
	if err != nil {
		return res, err
	}
	if tx == "" {
		return res, fmt.Errorf("undo session %s: %w", sess.ID, ErrNothingToUndo)
	}
	res.Tx = tx
	rec, err := j.readPlan(tx)
	if err != nil {
		return res, fmt.Errorf("undo session %s: %w", sess.ID, err)
	}
	doneIdx, err := j.readDone(tx)
	if err != nil {
		return res, err
	}
	a, err := newApplier(rec.Workspace, "", nil, Options{})
	if err != nil {
		return res, err
	}
	defer a.close()
	idx, used, err := revertedOps(sess.ID, tx, rec, doneIdx, except, &res)
	if err != nil {
		return res, err
	}
	if err := exceptUsed(sess.ID, tx, except, used); err != nil {
		return Result{Tx: tx}, err
	}
	// Refuse the whole undo if W changed after the apply.
	a.changedSinceApply(rec, idx, &res)
	if len(res.Problems) > 0 {
		return res, res.err()
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("undo session %s: %w", sess.ID, err)
	}
	if err := a.revert(j, rec, idx, &res, true); err != nil {
		return res, err
	}
	if err := writeFileSync(j.txDir(tx), undoneName, nil); err != nil {
		return res, err
	}
	if err := leaveApplied(j, sess); err != nil {
		return res, err
	}
	return res, res.err()
}

// latestApplied returns the newest transaction in j that completed and is not undone,
// or "" when there is none. It returns the error of listing the transactions.
func latestApplied(j *journal) (string, error) {
	txs, err := j.txs()
	if err != nil {
		return "", err
	}
	for i := len(txs) - 1; i >= 0; i-- {
		if done, undone := j.txStatus(txs[i]); done && !undone {
			return txs[i], nil
		}
	}
	return "", nil
}

// revertedOps splits the operations that transaction tx of session id carried out
// (doneIdx, indexes into rec.Ops, in the order done) into those undo reverts, returned in
// that order, and those an entry of except covers, whose paths it appends once each to
// res.Kept. used[n] reports whether except[n] covered any operation. An index outside
// rec.Ops is ErrJournal.
func revertedOps(id, tx string, rec *record, doneIdx []int, except []string, res *Result) (idx []int, used []bool, err error) {
	used = make([]bool, len(except))
	kept := map[string]bool{}
	for _, i := range doneIdx {
		if i < 0 || i >= len(rec.Ops) {
			return nil, nil, fmt.Errorf("undo session %s: tx %s: operation %d: %w", id, tx, i, ErrJournal)
		}
		if n := exceptedBy(rec.Ops[i].Path, except); n >= 0 {
			used[n] = true
			if !kept[rec.Ops[i].Path] {
				kept[rec.Ops[i].Path] = true
				res.Kept = append(res.Kept, rec.Ops[i].Path)
			}
			continue
		}
		idx = append(idx, i)
	}
	return idx, used, nil
}

// exceptUsed returns ErrNotInApply naming the first entry of except that covered no
// operation of transaction tx (used as revertedOps returns it), or nil.
func exceptUsed(id, tx string, except []string, used []bool) error {
	for n, u := range used {
		if !u {
			return fmt.Errorf("undo session %s: --except %q (apply %s): %w", id, except[n], tx, ErrNotInApply)
		}
	}
	return nil
}

// changedSinceApply checks the state of each path of the operations idx (indexes into
// rec.Ops) after its last operation: a path that is now neither what the apply wrote nor
// what it replaced is a Problem wrapping ErrChangedSinceApply, and a path that cannot be
// classified a Problem with that error. It appends the problems to res.Problems and
// changes nothing in W.
func (a *applier) changedSinceApply(rec *record, idx []int, res *Result) {
	last := map[string]int{}
	for _, i := range idx {
		last[rec.Ops[i].Path] = i
	}
	for _, i := range idx {
		if last[rec.Ops[i].Path] != i {
			continue
		}
		o := &rec.Ops[i]
		isNew, isOld, err := a.classify(o)
		if err != nil {
			res.Problems = append(res.Problems, Problem{Path: o.Path, Err: fmt.Errorf("undo %q: %w", o.Path, err)})
		} else if !isNew && !isOld {
			res.Problems = append(res.Problems, Problem{Path: o.Path,
				Err: fmt.Errorf("undo %q: %w", o.Path, ErrChangedSinceApply)})
		}
	}
}

// exceptedBy returns the index of the entry of except that covers path (path is that
// entry, lies below it, or is a directory above it), or -1.
func exceptedBy(path string, except []string) int {
	for n, e := range except {
		if path == e || strings.HasPrefix(path, e+"/") || strings.HasPrefix(e, path+"/") {
			return n
		}
	}
	return -1
}

// leaveApplied sets the session's state back from applied when no apply of it remains
// in effect: to stopped when a VM ran on it (HelperSession recorded), else to ready.
func leaveApplied(j *journal, sess *session.Session) error {
	if sess.State != session.StateApplied {
		return nil
	}
	txs, err := j.txs()
	if err != nil {
		return err
	}
	for _, tx := range txs {
		if done, undone := j.txStatus(tx); done && !undone {
			return nil
		}
	}
	st := session.StateReady
	if sess.HelperSession != "" {
		st = session.StateStopped
	}
	return sess.SetState(st)
}

// Recover rolls back every interrupted apply of the session (one killed before it
// completed): temp files are removed, and each path the apply already changed gets its
// prior state back from the journal. Paths that hold neither the prior nor the new state
// (the user changed them, or the apply never reached them and they had been changed) are
// left as they are and reported in Result.Problems without failing Recover. With nothing
// to recover it returns an empty Result. Recover is idempotent.
func Recover(ctx context.Context, sess *session.Session) (Result, error) {
	j, err := openJournal(sess.JournalDir())
	if err != nil {
		return Result{}, err
	}
	defer j.close()
	pend, err := j.interrupted()
	if err != nil || len(pend) == 0 {
		return Result{}, err
	}
	return recoverTxs(ctx, j, sess, pend)
}

func recoverTxs(ctx context.Context, j *journal, sess *session.Session, txs []string) (Result, error) {
	var res Result
	for k := len(txs) - 1; k >= 0; k-- {
		tx := txs[k]
		res.Tx = tx
		rec, err := j.readPlan(tx)
		if err != nil {
			return res, fmt.Errorf("recover session %s: %w", sess.ID, err)
		}
		a, err := newApplier(rec.Workspace, "", nil, Options{})
		if err != nil {
			return res, err
		}
		idx := make([]int, len(rec.Ops))
		for i := range idx {
			idx[i] = i
		}
		err = a.revert(j, rec, idx, &res, false)
		a.close()
		if err != nil {
			return res, err
		}
		if err := writeFileSync(j.txDir(tx), undoneName, nil); err != nil {
			return res, err
		}
	}
	return res, nil
}

// classify reports whether W's entry for o is in o's new state, its prior state, or
// neither (both false).
func (a *applier) classify(o *op) (isNew, isOld bool, err error) {
	st, ok, err := a.w.lstat(o.Path)
	if err != nil {
		return false, false, err
	}
	checkMode := o.Action == actChmod || o.Action == actRmdir
	isNew, err = a.matches(o.Path, &st, ok, &o.New, checkMode || o.New.Type != manifest.TypeDir)
	if err != nil || isNew {
		return isNew, false, err
	}
	isOld, err = a.matches(o.Path, &st, ok, &o.Old, checkMode || o.Old.Type != manifest.TypeDir)
	return false, isOld, err
}

func (a *applier) matches(rel string, st *unix.Stat_t, ok bool, es *entryState, checkMode bool) (bool, error) {
	if es.Type == manifest.TypeNone || !ok {
		return es.Type == manifest.TypeNone && !ok, nil
	}
	if manifest.TypeFromMode(st.Mode) != es.Type {
		return false, nil
	}
	switch es.Type {
	case manifest.TypeRegular:
		if st.Mode&0o7777 != es.Mode {
			return false, nil
		}
		h, _, err := hashFile(a.w, rel)
		if err != nil {
			return false, err
		}
		return bytes.Equal(h, es.Hash), nil
	case manifest.TypeSymlink:
		target, err := a.w.readlink(rel)
		return err == nil && target == es.Link, err
	case manifest.TypeDir:
		return !checkMode || st.Mode&0o7777 == es.Mode, nil
	}
	return false, nil
}

// revert undoes the operations idx of rec in reverse order. strict (Undo) treats a path
// in neither state as a problem that was checked beforehand; otherwise (Recover) it is
// left and reported.
func (a *applier) revert(j *journal, rec *record, idx []int, res *Result, strict bool) error {
	txd := j.txDir(rec.Tx)
	for _, i := range idx {
		o := &rec.Ops[i]
		if o.Action == actCreate || o.Action == actReplace {
			a.removeTemp(o)
		}
		a.removeTempName(o.Path, undoTemp(rec.Tx, i))
	}
	dirty := map[string]bool{}
	for k := len(idx) - 1; k >= 0; k-- {
		i := idx[k]
		o := &rec.Ops[i]
		isNew, _, err := a.classify(o)
		if err != nil {
			res.Problems = append(res.Problems, Problem{Path: o.Path, Err: fmt.Errorf("revert %q: %w", o.Path, err)})
			continue
		}
		if !isNew {
			continue // prior state (never applied or already reverted) or, for Recover, left
		}
		if err := a.revertOne(txd, rec.Tx, i, o); err != nil {
			res.Problems = append(res.Problems, Problem{Path: o.Path, Err: err})
			continue
		}
		d, _ := splitPath(o.Path)
		dirty[d] = true
		if !o.Implicit && (len(res.Applied) == 0 || res.Applied[len(res.Applied)-1] != o.Path) {
			res.Applied = append(res.Applied, o.Path)
		}
		hook("reverted", k)
	}
	if !strict {
		// Report paths that are now in neither state (left as they are).
		for _, i := range idx {
			o := &rec.Ops[i]
			if isNew, isOld, err := a.classify(o); err == nil && !isNew && !isOld && !o.Implicit {
				res.Problems = append(res.Problems, Problem{Path: o.Path,
					Err: fmt.Errorf("recover %q: left as it is: %w", o.Path, ErrChangedSinceApply)})
			}
		}
	}
	for d := range dirty {
		fd, err := a.w.dir(d)
		if err == nil {
			err = unix.Fsync(fd)
		}
		if err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("fsync workspace directory %q: %w", d, err)
		}
	}
	return nil
}

func undoTemp(tx string, i int) string { return ".brood-" + tx + "-" + strconv.Itoa(i) + ".undo" }

func (a *applier) removeTempName(path, temp string) {
	dir, _ := splitPath(path)
	if pfd, err := a.w.dir(dir); err == nil {
		unix.Unlinkat(pfd, temp, 0)
	}
}

// revertOne puts o's prior state back in place of its new state.
func (a *applier) revertOne(txd, tx string, i int, o *op) error {
	dir, name := splitPath(o.Path)
	pfd, err := a.w.dir(dir)
	if err != nil {
		return fmt.Errorf("revert %q: %w", o.Path, err)
	}
	switch o.Action {
	case actMkdir:
		// A directory the developer has put files in since is theirs now: it stays.
		if err := unix.Unlinkat(pfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOTEMPTY && err != unix.EEXIST {
			return fmt.Errorf("revert %q: rmdir: %w", o.Path, err)
		}
	case actCreate:
		if err := unix.Unlinkat(pfd, name, 0); err != nil {
			return fmt.Errorf("revert %q: unlink: %w", o.Path, err)
		}
	case actChmod:
		return fchmodEntry(pfd, name, o.Old.Type, o.Old.Mode)
	case actRmdir:
		if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
			return fmt.Errorf("revert %q: mkdir: %w", o.Path, err)
		}
		return fchmodEntry(pfd, name, manifest.TypeDir, o.Old.Mode)
	case actReplace, actDelete:
		var flags uint = unix.RENAME_NOREPLACE
		if o.Action == actReplace {
			flags = 0
		}
		return a.restore(pfd, name, txd, tx, i, o, flags)
	default:
		return fmt.Errorf("revert %q: %v: %w", o.Path, o.Action, ErrJournal)
	}
	return nil
}

// restore puts o's prior file or symlink at name in pfd with renameat2(flags): the
// journal's inode itself when on the same filesystem, else a verified copy.
func (a *applier) restore(pfd int, name, txd, tx string, i int, o *op, flags uint) error {
	temp := undoTemp(tx, i)
	if o.Old.Type == manifest.TypeSymlink {
		if err := unix.Symlinkat(o.Old.Link, pfd, temp); err != nil {
			return fmt.Errorf("revert %q: symlink: %w", o.Path, err)
		}
		if err := unix.Renameat2(pfd, temp, pfd, name, flags); err != nil {
			unix.Unlinkat(pfd, temp, 0)
			return fmt.Errorf("revert %q: renameat2: %w", o.Path, err)
		}
		return nil
	}
	if o.Old.Type != manifest.TypeRegular || !o.Backup {
		return fmt.Errorf("revert %q: no prior content in the journal: %w", o.Path, ErrJournal)
	}
	bdir := filepath.Join(txd, backupDir)
	bname := strconv.Itoa(i)
	src, err := os.Open(filepath.Join(bdir, bname))
	if err != nil {
		return fmt.Errorf("revert %q: open journal copy: %w", o.Path, err)
	}
	defer src.Close()
	d, err := digest.File(src)
	if err != nil {
		return fmt.Errorf("revert %q: read journal copy: %w", o.Path, err)
	}
	if !bytes.Equal(d.Sum, o.Old.Hash) {
		return fmt.Errorf("revert %q: journal copy does not match the prior hash: %w", o.Path, ErrJournal)
	}
	bfd, err := unix.Open(bdir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("revert %q: open journal: %w", o.Path, err)
	}
	defer unix.Close(bfd)
	var bst, wst unix.Stat_t
	if err := unix.Fstat(bfd, &bst); err != nil {
		return fmt.Errorf("revert %q: fstat journal: %w", o.Path, err)
	}
	if err := unix.Fstat(pfd, &wst); err != nil {
		return fmt.Errorf("revert %q: fstat workspace directory: %w", o.Path, err)
	}
	if bst.Dev != wst.Dev {
		err = a.restoreCopy(pfd, name, temp, src, o, flags)
	} else if err = restoreXattrs(int(src.Fd()), o); err == nil {
		// The prior inode itself (its attributes intact) or a copy given them above.
		err = unix.Renameat2(bfd, bname, pfd, name, flags)
		if err == unix.EXDEV {
			err = a.restoreCopy(pfd, name, temp, src, o, flags)
		} else if err == nil {
			err = fchmodEntry(pfd, name, manifest.TypeRegular, o.Old.Mode)
		}
	}
	if err != nil {
		return fmt.Errorf("revert %q: %w", o.Path, err)
	}
	return nil
}

// restoreXattrs gives the file fd exactly the extended attributes o's prior file had
// (setXattrs), and its kept inode flags, when the journal recorded them. A flag the
// filesystem takes only on an empty file (C on btrfs) is left to the journal's copy,
// which got it when it was made.
func restoreXattrs(fd int, o *op) error {
	if o.Old.FlagsRead {
		if cur, ok := inodeFlags(fd); ok && cur&keepFlags != o.Old.Flags&keepFlags {
			setInodeFlags(fd, o.Old.Flags&keepFlags) // best effort, see above
		}
	}
	if !o.Old.XattrsRead {
		return nil
	}
	return setXattrs(fd, o.Old.Xattrs)
}

func (a *applier) restoreCopy(pfd int, name, temp string, src *os.File, o *op, flags uint) error {
	if _, err := src.Seek(0, io.SeekStart); err != nil {
		return err
	}
	fd, err := unix.Openat(pfd, temp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("create temp file: %w", err)
	}
	f := os.NewFile(uintptr(fd), temp)
	fail := func(err error) error {
		f.Close()
		unix.Unlinkat(pfd, temp, 0)
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return fail(fmt.Errorf("fstat journal copy: %w", err))
	}
	if o.Old.FlagsRead {
		setInodeFlags(fd, o.Old.Flags&keepFlags) // best effort: an undo is not refused for a flag
	}
	got, err := a.cl.copyFile(int(src.Fd()), fd, st.Size, make([]byte, copyBufSize))
	if err != nil {
		return fail(fmt.Errorf("copy: %w", err))
	}
	if !bytes.Equal(got, o.Old.Hash) {
		return fail(fmt.Errorf("copy: %w", ErrHashMismatch))
	}
	if err := restoreXattrs(fd, o); err != nil {
		return fail(err)
	}
	if err := unix.Fchmod(fd, o.Old.Mode); err != nil {
		return fail(fmt.Errorf("fchmod: %w", err))
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("fsync: %w", err))
	}
	if err := f.Close(); err != nil {
		unix.Unlinkat(pfd, temp, 0)
		return fmt.Errorf("close: %w", err)
	}
	if err := unix.Renameat2(pfd, temp, pfd, name, flags); err != nil {
		unix.Unlinkat(pfd, temp, 0)
		return fmt.Errorf("renameat2: %w", err)
	}
	return nil
}
