package flush

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/internal/sparse"
)

// syncfsThreshold is the number of staged files from which one syncfs(2) of W's
// filesystem replaces one fsync(2) per file: for 1,000 modified 1–16 KiB files on this
// project's ext4 disk, 4 workers fsyncing each file took 747 ms against 310 ms with one
// syncfs (BenchmarkApply, 2026-11-29). Either way every temp file is durable before the
// first rename.
const syncfsThreshold = 16

// copyBufSize is the buffer of each copying worker (bytes).
const copyBufSize = 128 << 10

// journal writes the plan and the prior content of every replaced or deleted regular
// file, and fsyncs all of it, before anything in W is touched.
func (a *applier) journal(j *journal, rec *record, ops []*op) error {
	a.w.forget() // resolve directories again: W may have changed since the plan
	txd := j.txDir(rec.Tx)
	if err := os.Mkdir(txd, 0o700); err != nil {
		return fmt.Errorf("create journal tx: %w", err)
	}
	bdir := filepath.Join(txd, backupDir)
	if err := os.Mkdir(bdir, 0o700); err != nil {
		return fmt.Errorf("create journal tx: %w", err)
	}
	for i, o := range ops {
		if o.Action == actCreate || o.Action == actReplace {
			o.Temp = ".brood-" + rec.Tx + "-" + strconv.Itoa(i) + ".tmp"
		}
		o.Backup = (o.Action == actReplace || o.Action == actDelete) && o.Old.Type == manifest.TypeRegular
		rec.Ops = append(rec.Ops, *o)
	}
	if err := writeFileSync(txd, planName, rec); err != nil {
		return err
	}
	hook("journal-plan", len(ops))
	bfd, err := unix.Open(bdir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open journal backups: %w", err)
	}
	defer unix.Close(bfd)
	var bst, wst unix.Stat_t
	if err := unix.Fstat(bfd, &bst); err != nil {
		return fmt.Errorf("fstat journal backups: %w", err)
	}
	if err := unix.Fstat(a.w.root, &wst); err != nil {
		return fmt.Errorf("fstat workspace: %w", err)
	}
	sameFS := bst.Dev == wst.Dev
	buf := make([]byte, copyBufSize)
	n := 0
	for i, o := range ops {
		if !o.Backup {
			continue
		}
		o.err = a.backup(o, bfd, strconv.Itoa(i), sameFS, buf)
		n++
		hook("journal", n)
	}
	if err := unix.Fsync(bfd); err != nil {
		return fmt.Errorf("fsync journal backups: %w", err)
	}
	if err := syncDir(txd); err != nil {
		return err
	}
	return syncDir(j.dir)
}

// backup keeps W's entry of o in the journal as b/name: a hard link to the very inode
// checked in the plan (same filesystem, single link), else an fsync'd copy whose content
// digest must equal the prior one.
func (a *applier) backup(o *op, bfd int, name string, sameFS bool, buf []byte) error {
	dir, base := splitPath(o.Path)
	pfd, err := a.w.dir(dir)
	if err != nil {
		return fmt.Errorf("back up %q: %w", o.Path, err)
	}
	fd, err := unix.Openat(pfd, base, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("back up %q: %w", o.Path, &os.PathError{Op: "openat", Path: o.Path, Err: err})
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("back up %q: %w", o.Path, err)
	}
	if !sameEntry(&st, &o.seen) {
		return fmt.Errorf("back up %q: changed in the workspace since it was checked: %w", o.Path, ErrConflict)
	}
	proc := "/proc/self/fd/" + strconv.Itoa(fd)
	if sameFS && st.Nlink == 1 {
		if err := unix.Linkat(unix.AT_FDCWD, proc, bfd, name, unix.AT_SYMLINK_FOLLOW); err == nil {
			var after unix.Stat_t
			if err := unix.Fstat(fd, &after); err != nil {
				return fmt.Errorf("back up %q: %w", o.Path, err)
			}
			if after.Ino != st.Ino || after.Size != st.Size || after.Mtim != st.Mtim {
				return fmt.Errorf("back up %q: changed in the workspace while backing up: %w", o.Path, ErrConflict)
			}
			o.seen = after // the new link changed ctime
			return nil
		}
		// EPERM (protected_hardlinks), EXDEV (bind mount), …: fall back to a copy.
	}
	src, err := os.OpenFile(proc, os.O_RDONLY, 0)
	if err != nil {
		return fmt.Errorf("back up %q: %w", o.Path, err)
	}
	defer src.Close()
	dfd, err := unix.Openat(bfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("back up %q: create copy: %w", o.Path, err)
	}
	dst := os.NewFile(uintptr(dfd), name)
	defer dst.Close()
	if o.Old.FlagsRead {
		setInodeFlags(dfd, o.Old.Flags&keepFlags) // best effort: undo sets them again where it writes
	}
	got, err := a.cl.copyFile(int(src.Fd()), dfd, st.Size, buf)
	if err != nil {
		return fmt.Errorf("back up %q: copy: %w", o.Path, err)
	}
	if !bytes.Equal(got, o.Old.Hash) {
		return fmt.Errorf("back up %q: content changed since it was checked: %w", o.Path, ErrConflict)
	}
	if err := unix.Fchmod(dfd, o.Old.Mode&0o777); err != nil {
		return fmt.Errorf("back up %q: fchmod copy: %w", o.Path, err)
	}
	if err := dst.Sync(); err != nil {
		return fmt.Errorf("back up %q: fsync copy: %w", o.Path, err)
	}
	var after unix.Stat_t
	if err := unix.Fstat(fd, &after); err != nil || !sameEntry(&after, &st) {
		return fmt.Errorf("back up %q: changed in the workspace while backing up: %w", o.Path, ErrConflict)
	}
	return nil
}

// write performs the journaled operations on W and returns the indices of those applied.
// Per-path failures are recorded in op.err; the error is for failures that make the
// crash guarantee impossible to keep (syncfs, directory fsync).
func (a *applier) write(ops []*op) ([]int, error) {
	a.w.forget() // resolve every directory again: W may have changed since the plan
	hook("journaled", len(ops))
	dirty := map[string]bool{}
	var done []int
	mark := func(i int) {
		done = append(done, i)
		d, _ := splitPath(ops[i].Path)
		dirty[d] = true
	}
	// 1. Removals, deepest first; prior inodes are kept in the journal.
	for i, o := range ops {
		if o.err == nil && (o.Action == actDelete || o.Action == actRmdir) {
			if o.err = a.remove(o); o.err == nil {
				mark(i)
			}
			hook("removed", i)
		}
	}
	// 2. Directories, parents first.
	for i, o := range ops {
		if o.err == nil && o.Action == actMkdir {
			created, err := a.mkdir(o)
			o.created = created
			if o.err = err; err == nil && created {
				mark(i)
			}
		}
	}
	// 3. Temp files in their target directories, written in parallel and made durable.
	a.stageAll(ops)
	// 4. Renames and mode changes, in order.
	for i, o := range ops {
		switch o.Action {
		case actCreate, actReplace:
			if o.err == nil {
				o.err = a.rename(o)
			}
			if o.err != nil {
				a.removeTemp(o)
				continue
			}
			mark(i)
			hook("renamed", i)
		}
	}
	// 5. Modes of new directories and mode changes, children first (a directory made
	// read-only last).
	a.setModes(ops, mark)
	// 6. One fsync per touched directory.
	if err := a.syncDirs(dirty); err != nil {
		return nil, err
	}
	sort.Ints(done)
	return done, nil
}

// stageAll is write's step 3: it stages the new content of every create and replace in
// ops that has not failed yet (see stage), a.workers at a time. With fewer than
// syncfsThreshold files each temp file is fsync'd on its own; with more, one syncfs of
// W's filesystem makes them durable, and its failure fails every staged op. Failures are
// recorded in op.err.
func (a *applier) stageAll(ops []*op) {
	var staged []*op
	for _, o := range ops {
		if o.err == nil && (o.Action == actCreate || o.Action == actReplace) {
			staged = append(staged, o)
		}
	}
	perFile := len(staged) < syncfsThreshold
	a.parallel(staged, func(o *op, buf []byte) { o.err = a.stage(o, perFile, buf) })
	if !perFile {
		if err := unix.Syncfs(a.w.root); err != nil {
			for _, o := range staged {
				if o.err == nil {
					o.err = fmt.Errorf("apply %q: syncfs workspace: %w", o.Path, err)
				}
			}
		}
	}
	hook("staged", len(staged))
}

// setModes is write's step 5: walking ops backwards (children before their parents, so a
// directory made read-only comes last), it performs every mode change, passing its index
// to mark when it succeeds, and gives each directory step 2 created its planned mode
// (mkdir made it 0700). Failures are recorded in op.err.
func (a *applier) setModes(ops []*op, mark func(int)) {
	for i := len(ops) - 1; i >= 0; i-- {
		o := ops[i]
		if o.err != nil {
			continue
		}
		switch {
		case o.Action == actChmod:
			if o.err = a.chmod(o); o.err == nil {
				mark(i)
			}
		case o.Action == actMkdir && o.created:
			pfd, name, err := a.parentFD(o, "mkdir")
			if err == nil {
				err = fchmodEntry(pfd, name, manifest.TypeDir, o.New.Mode&0o777)
			}
			o.err = err
		}
	}
}

// syncDirs is write's step 6: it fsyncs every workspace directory in dirty
// ('/'-separated, relative to W), making the renames, removals and new entries in them
// durable. It returns the first directory that cannot be opened or fsync'd.
func (a *applier) syncDirs(dirty map[string]bool) error {
	for d := range dirty {
		fd, err := a.w.dir(d)
		if err == nil {
			err = unix.Fsync(fd)
		}
		if err != nil {
			return fmt.Errorf("fsync workspace directory %q: %w", d, err)
		}
	}
	return nil
}

// parallel runs f on every op with a.workers goroutines, each with its own buffer.
func (a *applier) parallel(ops []*op, f func(*op, []byte)) {
	ch := make(chan *op)
	var wg sync.WaitGroup
	for w := 0; w < a.workers && w < len(ops); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, copyBufSize)
			for o := range ch {
				f(o, buf)
			}
		}()
	}
	for _, o := range ops {
		ch <- o
	}
	close(ch)
	wg.Wait()
}

func (a *applier) parentFD(o *op, what string) (int, string, error) {
	dir, name := splitPath(o.Path)
	fd, err := a.w.dir(dir)
	if err != nil {
		return -1, name, fmt.Errorf("%s %q: %w", what, o.Path, err)
	}
	return fd, name, nil
}

// recheck fails with ErrConflict unless W's entry is still the one checked in the plan.
func (a *applier) recheck(pfd int, name string, o *op) error {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return fmt.Errorf("apply %q: removed from the workspace since it was checked: %w", o.Path, ErrConflict)
		}
		return fmt.Errorf("apply %q: lstat: %w", o.Path, err)
	}
	if o.Old.Type == manifest.TypeDir {
		if st.Ino != o.seen.Ino || manifest.TypeFromMode(st.Mode) != manifest.TypeDir {
			return fmt.Errorf("apply %q: replaced in the workspace since it was checked: %w", o.Path, ErrConflict)
		}
		return nil
	}
	if !sameEntry(&st, &o.seen) {
		return fmt.Errorf("apply %q: changed in the workspace since it was checked: %w", o.Path, ErrConflict)
	}
	return nil
}

func (a *applier) remove(o *op) error {
	pfd, name, err := a.parentFD(o, "delete")
	if err != nil {
		return err
	}
	if err := a.recheck(pfd, name, o); err != nil {
		return err
	}
	flags := 0
	if o.Action == actRmdir {
		flags = unix.AT_REMOVEDIR
	}
	if err := unix.Unlinkat(pfd, name, flags); err != nil {
		if err == unix.ENOTEMPTY || err == unix.EEXIST {
			return fmt.Errorf("delete %q: directory not empty in the workspace: %w", o.Path, ErrConflict)
		}
		return fmt.Errorf("delete %q: %w", o.Path, err)
	}
	return nil
}

// mkdir creates o's directory with mkdirat, mode 0700 until write sets its final mode;
// created is false when a plain directory is already there.
func (a *applier) mkdir(o *op) (created bool, err error) {
	pfd, name, err := a.parentFD(o, "mkdir")
	if err != nil {
		return false, err
	}
	if err := unix.Mkdirat(pfd, name, 0o700); err != nil {
		if err != unix.EEXIST {
			return false, fmt.Errorf("mkdir %q: %w", o.Path, err)
		}
		var st unix.Stat_t
		if err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || manifest.TypeFromMode(st.Mode) != manifest.TypeDir {
			return false, fmt.Errorf("mkdir %q: a non-directory appeared in the workspace: %w", o.Path, ErrConflict)
		}
		return false, nil
	}
	return true, nil
}

// stage writes o's new content to its temp file in the target directory (cloner.copyFile:
// reflinked or copied with its holes), verifies the content digest of what was written
// against the reviewed one, gives it the replaced file's owner (keepOwner) and extended
// attributes (o.keep, ACL included), then the mode (masked with 0777) and, when perFile,
// fsyncs it. The replaced file's inode flags (o.keepFlags) are set first, on the empty
// file.
func (a *applier) stage(o *op, perFile bool, buf []byte) error {
	pfd, _, err := a.parentFD(o, "write")
	if err != nil {
		return err
	}
	if o.New.Type == manifest.TypeSymlink {
		if err := unix.Symlinkat(o.New.Link, pfd, o.Temp); err != nil {
			return fmt.Errorf("write symlink %q: %w", o.Path, err)
		}
		return nil
	}
	fd, err := unix.Openat(pfd, o.Temp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("write %q: create temp file: %w", o.Path, err)
	}
	f := os.NewFile(uintptr(fd), o.Temp)
	fail := func(err error) error {
		f.Close()
		unix.Unlinkat(pfd, o.Temp, 0)
		return err
	}
	if o.Old.FlagsRead && o.Action == actReplace {
		// While the file is empty: btrfs applies C (no copy on write) only then.
		if err := setInodeFlags(fd, o.keepFlags); err != nil {
			return fail(fmt.Errorf("write %q: %w", o.Path, err))
		}
	}
	got, err := a.fillTemp(o, fd, buf)
	if err != nil {
		return fail(err)
	}
	if !bytes.Equal(got, o.New.Hash) {
		return fail(fmt.Errorf("write %q: %w", o.Path, ErrHashMismatch))
	}
	if o.Action == actReplace && manifest.TypeFromMode(o.seen.Mode) == manifest.TypeRegular {
		// Before fchmod: chown(2) may clear mode bits.
		if err := keepOwner(fd, &o.seen); err != nil {
			return fail(fmt.Errorf("write %q: %w", o.Path, err))
		}
	}
	if o.Old.XattrsRead {
		// After chown (which clears file capabilities), before fchmod: the temp file is
		// 0600 until it has the prior file's ACL, so nobody the ACL denies can open it.
		if err := setXattrs(fd, o.keep); err != nil {
			return fail(fmt.Errorf("write %q: %w", o.Path, err))
		}
	}
	if err := unix.Fchmod(fd, o.New.Mode&0o777); err != nil {
		return fail(fmt.Errorf("write %q: fchmod: %w", o.Path, err))
	}
	if perFile {
		if err := f.Sync(); err != nil {
			return fail(fmt.Errorf("write %q: fsync: %w", o.Path, err))
		}
	}
	if err := f.Close(); err != nil {
		unix.Unlinkat(pfd, o.Temp, 0)
		return fmt.Errorf("write %q: close: %w", o.Path, err)
	}
	return nil
}

// fillTemp writes o's new content to the empty temp file fd: the exact bytes the review
// gave (Item.Content: a hunk selection or a merge result) when there are any, else S's
// file, reflinked or copied with its holes (cloner.copyFile, with buf as its copy
// buffer). It returns the content digest of what was written, or an error naming o.Path.
func (a *applier) fillTemp(o *op, fd int, buf []byte) ([]byte, error) {
	if o.content != nil {
		if err := sparse.PwriteAll(fd, o.content, 0); err != nil {
			return nil, fmt.Errorf("write %q: %w", o.Path, err)
		}
		return digest.Bytes(o.content), nil
	}
	src, st, err := a.s.openFile(o.Path)
	if err != nil {
		return nil, fmt.Errorf("write %q: %w", o.Path, err)
	}
	got, err := a.cl.copyFile(int(src.Fd()), fd, st.Size, buf)
	src.Close()
	if err != nil {
		return nil, fmt.Errorf("write %q: copy from snapshot: %w", o.Path, err)
	}
	return got, nil
}

// rename moves o's temp file into place: RENAME_NOREPLACE for a path that was absent,
// else after re-checking that the target is the entry checked in the plan.
func (a *applier) rename(o *op) error {
	pfd, name, err := a.parentFD(o, "rename")
	if err != nil {
		return err
	}
	var flags uint
	if o.Action == actCreate {
		flags = unix.RENAME_NOREPLACE
	} else if err := a.recheck(pfd, name, o); err != nil {
		return err
	}
	if err := unix.Renameat2(pfd, o.Temp, pfd, name, flags); err != nil {
		if err == unix.EEXIST {
			return fmt.Errorf("apply %q: appeared in the workspace since the snapshot: %w", o.Path, ErrConflict)
		}
		return fmt.Errorf("apply %q: renameat2: %w", o.Path, err)
	}
	return nil
}

func (a *applier) removeTemp(o *op) {
	dir, _ := splitPath(o.Path)
	if pfd, err := a.w.dir(dir); err == nil && o.Temp != "" {
		unix.Unlinkat(pfd, o.Temp, 0)
	}
}

// chmod sets o.New.Mode (masked with 0777) on W's entry through an fd.
func (a *applier) chmod(o *op) error {
	pfd, name, err := a.parentFD(o, "chmod")
	if err != nil {
		return err
	}
	if err := a.recheck(pfd, name, o); err != nil {
		return err
	}
	return fchmodEntry(pfd, name, o.Old.Type, o.New.Mode&0o777)
}

// keepOwner gives the temp file fd the group of the file it replaces (old, its lstat
// when checked), and its owner too when running as root: a modified file keeps its owner
// and group, whatever group brood runs with (sg, newgrp). A user may only give a file a
// group they are a member of (chown(2)); when the kernel says EPERM the file keeps the
// group any new file gets there (the directory's setgid group, else the user's), as with
// cp. New files are never chowned.
func keepOwner(fd int, old *unix.Stat_t) error {
	var cur unix.Stat_t
	if err := unix.Fstat(fd, &cur); err != nil {
		return fmt.Errorf("fstat temp file: %w", err)
	}
	uid := -1
	if os.Geteuid() == 0 && cur.Uid != old.Uid {
		uid = int(old.Uid)
	}
	if uid < 0 && cur.Gid == old.Gid {
		return nil
	}
	err := unix.Fchown(fd, uid, int(old.Gid))
	if err == unix.EPERM {
		return nil
	}
	if err != nil {
		return fmt.Errorf("fchown temp file to %d:%d: %w", uid, old.Gid, err)
	}
	return nil
}

// fchmodEntry sets mode on the regular file or directory name in pfd without following
// a symlink: O_PATH open, type check, then fchmod on a read fd of that inode (or, when the
// entry is not readable, chmod through the O_PATH fd's /proc/self/fd link).
func fchmodEntry(pfd int, name string, typ manifest.Type, mode uint32) error {
	fd, err := unix.Openat(pfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("chmod %q: %w", name, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("chmod %q: %w", name, err)
	}
	if manifest.TypeFromMode(st.Mode) != typ || (typ != manifest.TypeRegular && typ != manifest.TypeDir) {
		return fmt.Errorf("chmod %q: not a regular file or directory: %w", name, ErrConflict)
	}
	proc := "/proc/self/fd/" + strconv.Itoa(fd)
	rfd, err := unix.Open(proc, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY, 0)
	if err == nil {
		defer unix.Close(rfd)
		if err := unix.Fchmod(rfd, mode); err != nil {
			return fmt.Errorf("chmod %q: fchmod: %w", name, err)
		}
		return nil
	}
	if !errors.Is(err, unix.EACCES) {
		return fmt.Errorf("chmod %q: %w", name, err)
	}
	if err := unix.Fchmodat(unix.AT_FDCWD, proc, mode, 0); err != nil {
		return fmt.Errorf("chmod %q: %w", name, err)
	}
	return nil
}
