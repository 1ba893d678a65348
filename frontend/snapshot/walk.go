package snapshot

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/digest"
	"brood.dev/brood/frontend/gitconfig"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/internal/sparse"
)

const (
	// specialBits are dropped from every mode in S (S_ISUID|S_ISGID|S_ISVTX).
	specialBits = unix.S_ISUID | unix.S_ISGID | unix.S_ISVTX
	// copyBuf is the per-worker copy buffer (bytes).
	copyBuf = 1 << 20
	// hashLimit: dense files up to this size (bytes) are copied through user space and
	// digested (package digest); larger or sparse files go through copy_file_range without a hash.
	hashLimit = 16 << 20
	// gitConfigLimit: larger git config files are emptied in S rather than parsed (bytes).
	gitConfigLimit = 4 << 20
	// gitRecordLimit: larger line files of gitDirFiles (reflogs of long-lived
	// repositories grow past gitConfigLimit) are emptied in S rather than read (bytes).
	gitRecordLimit = 64 << 20
	// jobQueue bounds the batches waiting for a worker, and so the directory fds kept
	// open; batchSize is the most entries per batch.
	jobQueue  = 128
	batchSize = 32

	openDir  = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
	openFile = unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC
	newFile  = unix.O_WRONLY | unix.O_CREAT | unix.O_EXCL | unix.O_NOFOLLOW | unix.O_CLOEXEC
)

type fileID struct{ dev, ino uint64 }

// testHookOpen, when set by a test, runs just before an entry of W is opened (after it
// was listed), to change W at the worst moment.
var testHookOpen func(rel string)

// testUnknownType, when set by a test, makes every d_type read as DT_UNKNOWN (as on
// filesystems that do not fill it in), forcing the fstatat path.
var testUnknownType bool

// taker is the state of one Take.
type taker struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	opts   Options
	rules  rules
	w, s   string
	umask  uint32
	jobs   chan []job // batches of entries of one directory

	err     error // first failure (also the context's cause)
	errOnce sync.Once

	noClone sync.Map // source st_dev → true once FICLONE was refused there

	mu       sync.Mutex
	links    map[fileID][]string // regular files with nlink > 1 that were copied
	secrets  map[fileID]string   // inode of an excluded regular file → rule
	results  []*result
	dirs     []manifest.Entry // directory entries, recorded by whoever releases last
	baseMade bool
	own      map[fileID]bool // S's root and the base root: never walked

	rootMode             uint32
	rootMtime, rootAtime unix.Timespec
}

// result is what one goroutine collected.
type result struct {
	entries []manifest.Entry
	rep     Report
}

// dir is an open directory of W and its copy in S. It is reference-counted: the walker
// while listing it, each queued job in it and each open subdirectory hold a reference;
// the last release sets the S directory's mode and times, records its entry, closes the
// fds and releases the parent.
type dir struct {
	t      *taker
	parent *dir
	rel    string // "" for the root
	name   string
	src    int // fd in W
	dst    int // fd in S (-1 in a dry run)
	wst    unix.Stat_t
	refs   atomic.Int32

	baseOnce sync.Once
	base     int
	baseErr  error
}

type job struct {
	d    *dir
	name string
	rel  string
	typ  uint8        // d_type
	st   *unix.Stat_t // set when the walker already stat'ed the entry
}

func (t *taker) fail(err error) {
	t.errOnce.Do(func() {
		t.err = err
		t.cancel(err)
	})
}

func (t *taker) abs(rel string) string { return filepath.Join(t.w, rel) }

// errf wraps err as `op "W/rel": err`. ENOENT for an entry that was just listed means
// W changed under us, so it also wraps ErrChanged.
func (t *taker) errf(op, rel string, err error) error {
	if err == unix.ENOENT {
		return fmt.Errorf("%s %q: %w: %w", op, t.abs(rel), err, ErrChanged)
	}
	return fmt.Errorf("%s %q: %w", op, t.abs(rel), err)
}

func (t *taker) changed(rel, what string) error {
	return fmt.Errorf("snapshot %q: %s: %w", t.abs(rel), what, ErrChanged)
}

func (t *taker) newResult() *result {
	r := &result{}
	t.mu.Lock()
	t.results = append(t.results, r)
	t.mu.Unlock()
	return r
}

// run walks the tree from root with the worker pool and returns when every fd is closed.
func (t *taker) run(root *dir) {
	n := defaultWorkers(t.opts.Workers)
	t.jobs = make(chan []job, jobQueue)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t.worker()
		}()
	}
	t.rootMode = root.wst.Mode & 0o777
	t.rootMtime, t.rootAtime = root.wst.Mtim, root.wst.Atim
	root.refs.Store(1)
	wr := t.newResult()
	t.walk(root, wr, make([]byte, 64<<10))
	root.release()
	close(t.jobs)
	wg.Wait()
}

// walk lists d and handles its entries: directories recursively here, everything else
// in a worker.
func (t *taker) walk(d *dir, r *result, buf []byte) {
	ents, err := readDir(d.src, buf)
	if err != nil {
		t.fail(t.errf("read directory", d.rel, err))
		return
	}
	// Entries other than directories go to the workers in batches, each holding one
	// reference on d, to keep channel hand-offs (and scheduler wake-ups) per batch, not
	// per file.
	var batch []job
	flush := func() bool {
		if len(batch) == 0 {
			return true
		}
		d.refs.Add(1)
		select {
		case t.jobs <- batch:
			batch = nil
			return true
		case <-t.ctx.Done():
			d.release()
			return false
		}
	}
	for _, e := range ents {
		if t.ctx.Err() != nil {
			return
		}
		rel := e.name
		if d.rel != "" {
			rel = d.rel + "/" + e.name
		}
		if rule := t.rules.match(d.name, e.name); rule != "" {
			if err := t.exclude(d, e.name, rel, rule, r); err != nil {
				t.fail(err)
				return
			}
			continue
		}
		j := job{d: d, name: e.name, rel: rel, typ: e.typ}
		if testUnknownType {
			j.typ = unix.DT_UNKNOWN
		}
		if j.typ == unix.DT_UNKNOWN {
			var st unix.Stat_t
			if err := unix.Fstatat(d.src, e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				t.fail(t.errf("stat", rel, err))
				return
			}
			j.st = &st
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				j.typ = unix.DT_DIR
			}
		}
		if j.typ == unix.DT_DIR {
			if len(batch) >= batchSize/4 && !flush() {
				return
			}
			if err := t.enter(j, r, buf); err != nil {
				t.fail(err)
				return
			}
			continue
		}
		batch = append(batch, j)
		if len(batch) == batchSize && !flush() {
			return
		}
	}
	flush()
}

// enter opens the subdirectory j (never through a symlink), creates its copy in S and
// walks it.
func (t *taker) enter(j job, r *result, buf []byte) error {
	d := j.d
	if testHookOpen != nil {
		testHookOpen(j.rel)
	}
	fd, err := unix.Openat(d.src, j.name, openDir, 0)
	if err == unix.ELOOP || err == unix.ENOTDIR {
		return t.changed(j.rel, "no longer a directory")
	}
	if unreadable(err) {
		return t.skipUnreadable(d.src, j, r)
	}
	if err != nil {
		return t.errf("open directory", j.rel, err)
	}
	if unreadable(unix.Faccessat(fd, ".", unix.R_OK|unix.X_OK, 0)) {
		unix.Close(fd) // listable but not searchable (or the reverse): skip it whole
		return t.skipUnreadable(d.src, j, r)
	}
	c := &dir{t: t, parent: d, rel: j.rel, name: j.name, src: fd, dst: -1, base: -1}
	if err := unix.Fstat(fd, &c.wst); err != nil {
		unix.Close(fd)
		return t.errf("stat directory", j.rel, err)
	}
	if j.st != nil && (j.st.Ino != c.wst.Ino || j.st.Dev != c.wst.Dev) {
		unix.Close(fd)
		return t.changed(j.rel, "replaced while listed")
	}
	if t.own[fileID{c.wst.Dev, c.wst.Ino}] {
		unix.Close(fd)
		why := "brood's own state directory (sessions and snapshots)"
		r.entries = append(r.entries, manifest.Entry{Path: j.rel, W: manifest.FromStat(&c.wst), Skipped: why})
		r.rep.Skipped = append(r.rep.Skipped, Item{j.rel, why})
		return nil
	}
	if !t.opts.DryRun {
		if err := unix.Mkdirat(d.dst, j.name, 0o700); err != nil {
			unix.Close(fd)
			return t.errf("create snapshot directory for", j.rel, err)
		}
		c.dst, err = unix.Openat(d.dst, j.name, openDir, 0)
		if err != nil {
			unix.Close(fd)
			return t.errf("open snapshot directory for", j.rel, err)
		}
	}
	d.refs.Add(1)
	c.refs.Store(1)
	r.rep.Dirs++
	t.walk(c, r, buf)
	c.release()
	return nil
}

// SkipUnreadable is the manifest's Skipped reason for an entry of W the invoking user
// cannot open (EACCES or EPERM, e.g. chmod 000).
const SkipUnreadable = "unreadable: permission denied"

func unreadable(err error) bool { return err == unix.EACCES || err == unix.EPERM }

// skipUnreadable records j, which the user cannot open, as skipped: it is not copied,
// the diff never proposes deleting it and flush never touches it or anything below it.
func (t *taker) skipUnreadable(parent int, j job, r *result) error {
	var st unix.Stat_t
	if err := unix.Fstatat(parent, j.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return t.errf("stat", j.rel, err)
	}
	r.entries = append(r.entries, manifest.Entry{Path: j.rel, W: manifest.FromStat(&st), Skipped: SkipUnreadable})
	r.rep.Skipped = append(r.rep.Skipped, Item{j.rel, SkipUnreadable})
	return nil
}

// exclude records a secret-rule match. Excluded directories are listed (never their
// files opened) only to learn the inodes of the secrets inside, so that other names of
// those inodes are excluded too.
func (t *taker) exclude(d *dir, name, rel, rule string, r *result) error {
	var st unix.Stat_t
	if err := unix.Fstatat(d.src, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return t.errf("stat", rel, err)
	}
	r.entries = append(r.entries, manifest.Entry{Path: rel, W: manifest.FromStat(&st), Excluded: rule})
	r.rep.Excluded = append(r.rep.Excluded, Item{rel, "secret rule " + rule})
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		t.mu.Lock()
		t.secrets[fileID{st.Dev, st.Ino}] = rule
		t.mu.Unlock()
	case unix.S_IFDIR:
		fd, err := unix.Openat(d.src, name, openDir, 0)
		if unreadable(err) {
			return nil // excluded anyway; no inode inside can be learned (or copied)
		}
		if err != nil {
			return t.errf("open excluded directory", rel, err)
		}
		defer unix.Close(fd)
		return t.scanSecrets(fd, rel, rule, 0)
	}
	return nil
}

// scanSecrets records the inodes of regular files below an excluded directory.
func (t *taker) scanSecrets(fd int, rel, rule string, depth int) error {
	if depth > 64 {
		return nil
	}
	ents, err := readDir(fd, make([]byte, 16<<10))
	if err != nil {
		return t.errf("read excluded directory", rel, err)
	}
	for _, e := range ents {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, e.name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			t.mu.Lock()
			t.secrets[fileID{st.Dev, st.Ino}] = rule
			t.mu.Unlock()
		case unix.S_IFDIR:
			cfd, err := unix.Openat(fd, e.name, openDir, 0)
			if err != nil {
				continue
			}
			err = t.scanSecrets(cfd, rel+"/"+e.name, rule, depth+1)
			unix.Close(cfd)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

func (d *dir) release() {
	if d.refs.Add(-1) != 0 {
		return
	}
	d.t.finishDir(d)
	if d.parent != nil {
		d.parent.release()
	}
}

// finishDir sets the mode and times of d's copy (after all its children were written)
// and records its entry.
func (t *taker) finishDir(d *dir) {
	defer func() {
		closeFd(d.src)
		closeFd(d.dst)
		closeFd(d.base)
	}()
	if t.ctx.Err() != nil {
		return
	}
	e := manifest.Entry{Path: d.rel, W: manifest.FromStat(&d.wst)}
	if d.dst >= 0 {
		if err := unix.Fchmod(d.dst, d.wst.Mode&0o777); err != nil {
			t.fail(t.errf("set mode of snapshot copy of", d.rel, err))
			return
		}
		if err := futimens(d.dst, &d.wst); err != nil {
			t.fail(t.errf("set times of snapshot copy of", d.rel, err))
			return
		}
		var sst unix.Stat_t
		if err := unix.Fstat(d.dst, &sst); err != nil {
			t.fail(t.errf("stat snapshot copy of", d.rel, err))
			return
		}
		e.S = manifest.FromStat(&sst)
	}
	if d.parent == nil {
		return // the root is not an entry
	}
	t.mu.Lock()
	t.dirs = append(t.dirs, e)
	t.mu.Unlock()
}

// baseFd returns d's directory in the base tree, creating it (mode 0700) on first use.
func (d *dir) baseFd() (int, error) {
	d.baseOnce.Do(func() {
		t := d.t
		if d.parent == nil {
			if err := unix.Mkdir(t.opts.BaseDir, 0o700); err != nil {
				d.baseErr = fmt.Errorf("create base dir %q: %w", t.opts.BaseDir, err)
				return
			}
			t.mu.Lock()
			t.baseMade = true
			t.mu.Unlock()
			d.base, d.baseErr = unix.Open(t.opts.BaseDir, openDir, 0)
			if d.baseErr != nil {
				d.baseErr = fmt.Errorf("open base dir %q: %w", t.opts.BaseDir, d.baseErr)
			}
			return
		}
		pfd, err := d.parent.baseFd()
		if err != nil {
			d.baseErr = err
			return
		}
		if err := unix.Mkdirat(pfd, d.name, 0o700); err != nil {
			d.baseErr = fmt.Errorf("create base directory for %q: %w", d.rel, err)
			return
		}
		d.base, d.baseErr = unix.Openat(pfd, d.name, openDir, 0)
		if d.baseErr != nil {
			d.baseErr = fmt.Errorf("open base directory for %q: %w", d.rel, d.baseErr)
		}
	})
	return d.base, d.baseErr
}

// worker copies the entries the walker queues.
type worker struct {
	t   *taker
	r   *result
	buf []byte
	h   *digest.Hasher
}

func (t *taker) worker() {
	w := &worker{t: t, r: t.newResult(), h: digest.New()}
	if !t.opts.DryRun {
		w.buf = make([]byte, copyBuf)
	}
	for batch := range t.jobs {
		for _, j := range batch {
			if t.ctx.Err() != nil {
				break
			}
			if err := w.do(j); err != nil {
				t.fail(err)
			}
		}
		batch[0].d.release()
	}
}

func (w *worker) do(j job) error {
	t := w.t
	if j.typ == unix.DT_REG {
		return w.file(j)
	}
	st := j.st
	if st == nil {
		st = new(unix.Stat_t)
		if err := unix.Fstatat(j.d.src, j.name, st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return t.errf("stat", j.rel, err)
		}
		j.st = st
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return w.file(j)
	case unix.S_IFLNK:
		return w.symlink(j)
	case unix.S_IFDIR:
		return t.changed(j.rel, "became a directory")
	}
	why := skipReason(st.Mode)
	w.r.entries = append(w.r.entries, manifest.Entry{Path: j.rel, W: manifest.FromStat(st), Skipped: why})
	w.r.rep.Skipped = append(w.r.rep.Skipped, Item{j.rel, why})
	return nil
}

// symlink recreates a symlink in S with the same target; the target is never resolved.
func (w *worker) symlink(j job) error {
	t := w.t
	target, err := readlinkat(j.d.src, j.name, j.st.Size)
	if err == unix.EINVAL || err == unix.ENOENT {
		return t.changed(j.rel, "no longer a symlink")
	}
	if err != nil {
		return t.errf("read symlink", j.rel, err)
	}
	sum := sha256.Sum256([]byte(target))
	e := manifest.Entry{Path: j.rel, W: manifest.FromStat(j.st), LinkHash: sum[:]}
	w.r.rep.Symlinks++
	if j.d.dst >= 0 {
		if err := unix.Symlinkat(target, j.d.dst, j.name); err != nil {
			return t.errf("create snapshot symlink for", j.rel, err)
		}
		ts := []unix.Timespec{j.st.Atim, j.st.Mtim}
		if err := unix.UtimesNanoAt(j.d.dst, j.name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return t.errf("set times of snapshot symlink for", j.rel, err)
		}
		var sst unix.Stat_t
		if err := unix.Fstatat(j.d.dst, j.name, &sst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return t.errf("stat snapshot symlink for", j.rel, err)
		}
		e.S = manifest.FromStat(&sst)
	}
	w.r.entries = append(w.r.entries, e)
	return nil
}

func readlinkat(dirfd int, name string, size int64) (string, error) {
	n := int(size) + 1
	if n < 64 {
		n = 64
	}
	for {
		buf := make([]byte, n)
		got, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if got < len(buf) {
			return string(buf[:got]), nil
		}
		n *= 2
	}
}

// file copies one regular file: FICLONE where possible, else a hole-preserving copy. A
// file the user cannot open is recorded as skipped; one that changed since it was listed
// (now a symlink, not a regular file, another inode, or a size that changes during the
// copy) fails with ErrChanged; other errors name the operation and j.rel.
func (w *worker) file(j job) error {
	t := w.t
	if testHookOpen != nil {
		testHookOpen(j.rel)
	}
	src, err := unix.Openat(j.d.src, j.name, openFile, 0)
	if err != nil {
		return w.openFailed(j, err)
	}
	defer unix.Close(src)
	var st unix.Stat_t
	if err := w.statSource(j, src, &st); err != nil {
		return err
	}
	e := manifest.Entry{Path: j.rel, W: manifest.FromStat(&st)}
	if kind := gitFileOf(j.rel); kind != notGitFile {
		return w.gitFile(j, kind, src, &st, e)
	}
	if j.d.dst < 0 {
		w.r.entries = append(w.r.entries, e)
		return nil
	}
	perm := st.Mode & 0o777
	dst, err := unix.Openat(j.d.dst, j.name, newFile, perm)
	if err != nil {
		return t.errf("create snapshot copy of", j.rel, err)
	}
	defer closeFd(dst)
	reflinked := st.Size > 0 && !t.opts.NoReflink && t.clone(dst, src, st.Dev)
	if err := w.fillCopy(j, src, dst, &st, reflinked, &e); err != nil {
		return err
	}
	if err := w.finishFile(j, dst, perm, &st, &e); err != nil {
		return err
	}
	if reflinked && t.opts.KeepBase {
		if err := w.baseClone(j, src); err != nil {
			return err
		}
	}
	w.r.entries = append(w.r.entries, e)
	return nil
}

// openFailed handles err from opening j's file (O_NOFOLLOW, O_NONBLOCK: openFile): EACCES
// or EPERM record j as skipped (nil, or the error of that fstatat), ELOOP, ENXIO and EISDIR
// mean j is no longer the regular file listed (ErrChanged); anything else is returned
// naming j.rel.
func (w *worker) openFailed(j job, err error) error {
	t := w.t
	switch {
	case unreadable(err):
		return t.skipUnreadable(j.d.src, j, w.r)
	case err == unix.ELOOP:
		return t.changed(j.rel, "became a symlink")
	case err == unix.ENXIO || err == unix.EISDIR:
		return t.changed(j.rel, "no longer a regular file")
	}
	return t.errf("open", j.rel, err)
}

// statSource fstats the opened file src into st and checks that it is still the regular
// file the directory listing gave (same inode and device; ErrChanged otherwise). It
// counts the file and its bytes in the report and records a file with several hard links
// in t.links under its inode.
func (w *worker) statSource(j job, src int, st *unix.Stat_t) error {
	t := w.t
	if err := unix.Fstat(src, st); err != nil {
		return t.errf("stat", j.rel, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || j.st != nil && (j.st.Ino != st.Ino || j.st.Dev != st.Dev) {
		return t.changed(j.rel, "no longer the regular file listed")
	}
	w.r.rep.Files++
	w.r.rep.Bytes += st.Size
	if st.Nlink > 1 {
		t.mu.Lock()
		id := fileID{st.Dev, st.Ino}
		t.links[id] = append(t.links[id], j.rel)
		t.mu.Unlock()
	}
	return nil
}

// clone tries FICLONE from src to dst unless an earlier clone from device dev failed
// in a way that means the filesystem pair cannot clone (EOPNOTSUPP, EXDEV, ENOTTY,
// ENOSYS: remembered in t.noClone). It reports whether dst now shares src's extents;
// other errors (EINVAL for a btrfs nodatacow file, EPERM, ...) concern this file only,
// which the caller then copies.
func (t *taker) clone(dst, src int, dev uint64) bool {
	if _, no := t.noClone.Load(dev); no {
		return false
	}
	err := unix.IoctlFileClone(dst, src)
	switch {
	case err == nil:
		return true
	case err == unix.EOPNOTSUPP || err == unix.EXDEV || err == unix.ENOTTY || err == unix.ENOSYS:
		// This filesystem pair cannot clone: stop trying for this source device.
		t.noClone.Store(dev, true)
	}
	return false
}

// fillCopy gives dst src's content when clone did not (reflinked false): a
// hole-preserving copy of a non-empty file, which may also hash it, or nothing for an
// empty one, whose hash is digest.Empty. It records the hash in e and counts the
// reflink, copy or hash in the report. A size change during the copy is ErrChanged.
func (w *worker) fillCopy(j job, src, dst int, st *unix.Stat_t, reflinked bool, e *manifest.Entry) error {
	switch {
	case reflinked:
		w.r.rep.Reflinked++
	case st.Size > 0:
		sum, err := w.copyData(src, dst, st)
		if err != nil {
			if errors.Is(err, ErrChanged) {
				return w.t.changed(j.rel, "size changed while copied")
			}
			return w.t.errf("copy", j.rel, err)
		}
		w.r.rep.Copied++
		if sum != nil {
			e.Hash = sum
			w.r.rep.Hashed++
		}
	default:
		e.Hash = digest.Empty
		w.r.rep.Hashed++
	}
	return nil
}

// finishFile sets the copy's mode (when the umask changed it) and times, and records its
// stat in e.S.
func (w *worker) finishFile(j job, dst int, perm uint32, st *unix.Stat_t, e *manifest.Entry) error {
	t := w.t
	if perm&t.umask != 0 {
		if err := unix.Fchmod(dst, perm); err != nil {
			return t.errf("set mode of snapshot copy of", j.rel, err)
		}
	}
	if err := futimens(dst, st); err != nil {
		return t.errf("set times of snapshot copy of", j.rel, err)
	}
	var sst unix.Stat_t
	if err := unix.Fstat(dst, &sst); err != nil {
		return t.errf("stat snapshot copy of", j.rel, err)
	}
	e.S = manifest.FromStat(&sst)
	return nil
}

// baseClone reflinks src into the base tree at j's path (mode 0400).
func (w *worker) baseClone(j job, src int) error {
	t := w.t
	bd, err := j.d.baseFd()
	if err != nil {
		return err
	}
	fd, err := unix.Openat(bd, j.name, newFile, 0o400)
	if err != nil {
		return t.errf("create base copy of", j.rel, err)
	}
	defer unix.Close(fd)
	if err := unix.IoctlFileClone(fd, src); err != nil {
		return t.errf("clone base copy of", j.rel, err)
	}
	w.r.rep.BaseFiles++
	return nil
}

// copyData copies st.Size bytes from src to dst (both at offset 0). A dense file up to
// hashLimit goes through the worker's buffer and is digested (its content digest, package
// digest, is returned);
// otherwise only the data extents (SEEK_DATA/SEEK_HOLE) are copied with copy_file_range,
// so holes stay holes, and no hash is taken. It returns ErrChanged if the file shrank.
func (w *worker) copyData(src, dst int, st *unix.Stat_t) ([]byte, error) {
	size := st.Size
	if st.Blocks*512 >= size && size <= hashLimit {
		w.h.Reset()
		var off int64
		for off < size {
			n := min(int64(len(w.buf)), size-off)
			got, err := unix.Pread(src, w.buf[:n], off)
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return nil, err
			}
			if got == 0 {
				return nil, ErrChanged
			}
			w.h.Write(w.buf[:got])
			if err := writeAll(dst, w.buf[:got]); err != nil {
				return nil, err
			}
			off += int64(got)
		}
		return w.h.Result().Sum, nil
	}
	if err := sparse.Copy(src, dst, size, w.buf); err != nil {
		if errors.Is(err, sparse.ErrShrank) {
			return nil, ErrChanged
		}
		return nil, err
	}
	return nil, nil
}

// gitFile writes a sanitized copy of a file of gitDirFiles (kind is not notGitFile).
// When nothing needs removing the bytes are copied unchanged; when a config file cannot
// be parsed, or the file exceeds gitConfigLimit (gitRecordLimit for line files), S gets
// an empty file. The manifest digest is of W's bytes.
func (w *worker) gitFile(j job, kind gitFileKind, src int, st *unix.Stat_t, e manifest.Entry) error {
	t := w.t
	var content []byte
	var note string
	limit := int64(gitConfigLimit)
	if kind != configFile {
		limit = gitRecordLimit
	}
	if st.Size > limit {
		note = fmt.Sprintf("larger than %d bytes: emptied", limit)
	} else {
		content = make([]byte, st.Size)
		for off := 0; off < len(content); {
			n, err := unix.Pread(src, content[off:], int64(off))
			if err == unix.EINTR {
				continue
			}
			if err != nil {
				return t.errf("read", j.rel, err)
			}
			if n == 0 {
				return t.changed(j.rel, "size changed while read")
			}
			off += n
		}
		e.Hash = digest.Bytes(content)
		w.r.rep.Hashed++
	}
	out := content
	if note == "" {
		var clean []byte
		var removed []gitconfig.Removal
		var err error
		if kind == configFile {
			clean, removed, err = gitconfig.Sanitize(content)
		} else {
			clean, removed = gitconfig.SanitizeLines(kind.lineKind(), content)
		}
		switch {
		case err != nil:
			note = "unparseable git config (" + err.Error() + "): emptied"
		case len(removed) > 0:
			out = clean
			w.r.rep.Sanitized = append(w.r.rep.Sanitized, SanitizedFile{Path: j.rel, Removed: removed})
			e.Sanitized = true
		}
	}
	if note != "" {
		out = nil
		e.Sanitized = true
		w.r.rep.Sanitized = append(w.r.rep.Sanitized, SanitizedFile{Path: j.rel, Note: note})
	}
	if j.d.dst < 0 {
		w.r.entries = append(w.r.entries, e)
		return nil
	}
	perm := st.Mode & 0o777
	dst, err := unix.Openat(j.d.dst, j.name, newFile, perm)
	if err != nil {
		return t.errf("create snapshot copy of", j.rel, err)
	}
	defer unix.Close(dst)
	if err := writeAll(dst, out); err != nil {
		return t.errf("write sanitized copy of", j.rel, err)
	}
	w.r.rep.Copied++
	if err := w.finishFile(j, dst, perm, st, &e); err != nil {
		return err
	}
	w.r.entries = append(w.r.entries, e)
	return nil
}
