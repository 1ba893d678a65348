// Package snapshot copies a workspace W into a snapshot S for an agent to work on, and
// records the manifest the diff and flush later compare against.
//
// The walk opens every directory relative to its parent's fd with
// O_NOFOLLOW|O_DIRECTORY, lists it with getdents64 and stats entries with
// fstatat(AT_SYMLINK_NOFOLLOW) or fstat on an O_NOFOLLOW fd, so no symlink in W is ever
// followed, even when W changes during the walk (the snapshot then fails with ErrChanged).
// Regular files are cloned with FICLONE where the filesystem supports it, else copied
// preserving holes (SEEK_DATA/SEEK_HOLE) and, when small and dense, digested while
// copied (content digest, package digest). Symlinks are recreated as links. FIFOs,
// sockets and devices are never opened: they are recorded as skipped. Permission bits
// are kept, setuid/setgid/sticky dropped; hardlinks in W become separate files in S.
//
// Secret rules (BuiltinRules, plus Options.ExtraRules which can only add) keep matching
// entries, and every other name of an excluded file's inode, out of S. Git config files
// and the other files of gitDirFiles inside .git directories are sanitized with package
// gitconfig. Excluded, skipped and sanitized entries are recorded in the manifest so the
// diff never proposes deleting them.
//
// Privilege: none; it runs in brood as the developer, before any VM exists.
package snapshot

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/gitconfig"
	"brood.dev/brood/frontend/manifest"
)

// Options configure Take. The zero value snapshots with the built-in secret rules only,
// reflinks where possible, keeps no base, and uses one worker per CPU (at least 2).
type Options struct {
	// DryRun walks W and reports what would be excluded, skipped and sanitized, and
	// creates nothing (the S argument of Take is ignored).
	DryRun bool
	// KeepBase also clones every regular file that was reflinked into S into BaseDir
	// (same relative path, mode 0400), for a later three-way merge. Files that cannot be
	// reflinked get no base copy (Report.BaseFiles counts those that did).
	KeepBase bool
	BaseDir  string // must not exist; created by Take when needed
	// NoReflink forces byte copies even where FICLONE works (benchmarks, tests).
	NoReflink bool
	// Workers is the number of file-copy goroutines besides the walker (0: NumCPU, ≥2, ≤8).
	Workers int
	// ExtraRules are additional secret rules: path.Match patterns matched against each
	// entry name (lower-cased). They can only add exclusions.
	ExtraRules []string
	// SkipDirs are directories never copied wherever they appear in W (compared by
	// device and inode, so any name of them counts), recorded as skipped: brood's own
	// state directory when W contains it (brood session new --workspace ~). Paths that do
	// not exist are ignored.
	SkipDirs []string
}

// Item is one excluded or skipped path (relative to W, raw bytes) and why.
type Item struct {
	Path string `json:"path"`
	Why  string `json:"why"`
}

// SanitizedFile is a file of a git directory (a config, a legacy remote, FETCH_HEAD, a
// reflog: see gitDirFiles) whose copy in S was rewritten. Removal keys of line files are
// "line 3", "lines 1, 4, 9 and 12 more".
type SanitizedFile struct {
	Path    string              `json:"path"`
	Removed []gitconfig.Removal `json:"removed,omitempty"`
	Note    string              `json:"note,omitempty"` // e.g. why the file was emptied
}

// Report summarises one Take. Counts cover W's entries; Bytes is the apparent size of
// regular files copied (bytes).
type Report struct {
	Files     int             `json:"files"`
	Dirs      int             `json:"dirs"`
	Symlinks  int             `json:"symlinks"`
	Bytes     int64           `json:"bytes"`
	Reflinked int             `json:"reflinked"`  // regular files cloned with FICLONE
	Copied    int             `json:"copied"`     // regular files copied byte-wise
	Hashed    int             `json:"hashed"`     // regular files with a content digest in the manifest
	BaseFiles int             `json:"base_files"` // files cloned into Options.BaseDir
	Excluded  []Item          `json:"excluded"`
	Skipped   []Item          `json:"skipped"`
	Sanitized []SanitizedFile `json:"sanitized"`
	Elapsed   time.Duration   `json:"elapsed_ns"`
}

func (r *Report) add(o *Report) {
	r.Files += o.Files
	r.Dirs += o.Dirs
	r.Symlinks += o.Symlinks
	r.Bytes += o.Bytes
	r.Reflinked += o.Reflinked
	r.Copied += o.Copied
	r.Hashed += o.Hashed
	r.BaseFiles += o.BaseFiles
	r.Excluded = append(r.Excluded, o.Excluded...)
	r.Skipped = append(r.Skipped, o.Skipped...)
	r.Sanitized = append(r.Sanitized, o.Sanitized...)
}

// Take snapshots the workspace directory w into s, which must not exist and is created
// with W's root mode. It returns the manifest (not yet written: see manifest.Write) and a
// report. On error nothing it created is left behind (s and Options.BaseDir are
// removed); errors name the path in W and wrap ErrChanged, ErrNotDir, ErrBadRule or the
// system error.
func Take(ctx context.Context, w, s string, opts Options) (*manifest.Manifest, *Report, error) {
	start := time.Now()
	rs, err := newRules(opts.ExtraRules)
	if err != nil {
		return nil, nil, err
	}
	w, wfd, err := openWorkspace(w)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	t := &taker{
		ctx: ctx, cancel: cancel, opts: opts, rules: rs, w: w, s: s,
		umask:   processUmask(),
		links:   map[fileID][]string{},
		secrets: map[fileID]string{},
	}
	root, err := t.openRoot(wfd)
	if err != nil {
		return nil, nil, err
	}
	if opts.DryRun {
		t.addSkipDirs()
	} else {
		if err := t.ownDirs(root); err != nil {
			closeFd(root.dst)
			closeFd(root.base)
			unix.Close(wfd)
			t.abort()
			return nil, nil, err
		}
	}
	t.run(root)
	if err := context.Cause(ctx); err != nil {
		t.abort()
		if errors.Is(err, context.Canceled) && t.err == nil {
			err = fmt.Errorf("snapshot %q: %w", w, err)
		}
		return nil, nil, err
	}
	m, rep, err := t.finish()
	if err != nil {
		t.abort()
		return nil, nil, err
	}
	if t.baseMade && rep.BaseFiles == 0 {
		removeTree(opts.BaseDir) // nothing could be reflinked
	}
	rep.Elapsed = time.Since(start)
	return m, rep, nil
}

// openWorkspace makes w absolute and opens it as a directory. The root is the one path
// the user names: it may be reached through symlinks; nothing below it is. It returns
// the absolute path and the descriptor, or an error naming w (ErrNotDir when w is not a
// directory).
func openWorkspace(w string) (string, int, error) {
	w, err := filepath.Abs(w)
	if err != nil {
		return "", -1, fmt.Errorf("resolve workspace %q: %w", w, err)
	}
	wfd, err := unix.Open(w, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ENOTDIR {
			err = ErrNotDir
		}
		return "", -1, fmt.Errorf("open workspace %q: %w", w, err)
	}
	return w, wfd, nil
}

// openRoot returns the walk's root directory: the workspace descriptor wfd with its
// stat and, unless this is a dry run, the snapshot directory t.s, created (mode 0700
// until finishDir gives it W's mode) and opened without following a symlink. On error it
// closes wfd and removes t.s if it created it.
func (t *taker) openRoot(wfd int) (*dir, error) {
	root := &dir{t: t, src: wfd, dst: -1, base: -1}
	if err := unix.Fstat(wfd, &root.wst); err != nil {
		unix.Close(wfd)
		return nil, fmt.Errorf("stat workspace %q: %w", t.w, err)
	}
	if t.opts.DryRun {
		return root, nil
	}
	if err := os.Mkdir(t.s, 0o700); err != nil {
		unix.Close(wfd)
		return nil, fmt.Errorf("create snapshot dir: %w", err)
	}
	var err error
	root.dst, err = unix.Open(t.s, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		unix.Close(wfd)
		os.Remove(t.s)
		return nil, fmt.Errorf("open snapshot dir %q: %w", t.s, err)
	}
	return root, nil
}

// abort removes what a failed Take created: the snapshot directory and, when this Take
// made it, Options.BaseDir. A dry run created neither.
func (t *taker) abort() {
	if !t.opts.DryRun {
		removeTree(t.s)
		if t.baseMade {
			removeTree(t.opts.BaseDir)
		}
	}
}

// addSkipDirs records Options.SkipDirs that exist as never walked.
func (t *taker) addSkipDirs() {
	if t.own == nil {
		t.own = map[fileID]bool{}
	}
	for _, d := range t.opts.SkipDirs {
		var st unix.Stat_t
		if err := unix.Stat(d, &st); err == nil {
			t.own[fileID{st.Dev, st.Ino}] = true
		}
	}
}

// ownDirs records S's root (and creates the base root when KeepBase) so that a walk of a
// workspace that contains the session directory never copies S into itself.
func (t *taker) ownDirs(root *dir) error {
	var st unix.Stat_t
	if err := unix.Fstat(root.dst, &st); err != nil {
		return fmt.Errorf("stat snapshot dir %q: %w", t.s, err)
	}
	t.addSkipDirs()
	t.own[fileID{st.Dev, st.Ino}] = true
	if !t.opts.KeepBase {
		return nil
	}
	if _, err := root.baseFd(); err != nil {
		return err
	}
	if err := unix.Fstat(root.base, &st); err != nil {
		return fmt.Errorf("stat base dir %q: %w", t.opts.BaseDir, err)
	}
	t.own[fileID{st.Dev, st.Ino}] = true
	return nil
}

// finish merges the per-goroutine results, applies the hardlinked-secret rule and builds
// the manifest.
func (t *taker) finish() (*manifest.Manifest, *Report, error) {
	rep := &Report{}
	entries := t.dirs
	for _, r := range t.results {
		rep.add(&r.rep)
		entries = append(entries, r.entries...)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	if err := t.excludeSecretLinks(entries, rep); err != nil {
		return nil, nil, err
	}
	for _, l := range [][]Item{rep.Excluded, rep.Skipped} {
		sort.Slice(l, func(i, j int) bool { return l[i].Path < l[j].Path })
	}
	sort.Slice(rep.Sanitized, func(i, j int) bool { return rep.Sanitized[i].Path < rep.Sanitized[j].Path })
	m := &manifest.Manifest{
		Version:   manifest.FormatVersion,
		Workspace: t.w,
		Created:   time.Now().UnixNano(),
		Entries:   entries,
	}
	return m, rep, nil
}

// excludeSecretLinks turns every copied name of an excluded secret's inode into an
// excluded entry and removes its copy from S (and the base). This runs after the whole
// walk, so the result does not depend on which name was met first.
func (t *taker) excludeSecretLinks(entries []manifest.Entry, rep *Report) error {
	idx := func(p string) int {
		i := sort.Search(len(entries), func(i int) bool { return entries[i].Path >= p })
		if i < len(entries) && entries[i].Path == p {
			return i
		}
		return -1
	}
	for id, rule := range t.secrets {
		for _, rel := range t.links[id] {
			i := idx(rel)
			if i < 0 {
				continue
			}
			e := &entries[i]
			if !t.opts.DryRun && e.S.Type != manifest.TypeNone {
				if err := t.removeFromS(rel, entries, idx); err != nil {
					return err
				}
			}
			rep.Files--
			rep.Bytes -= e.W.Size
			if e.Hash != nil {
				rep.Hashed--
			}
			e.S, e.Hash, e.Sanitized = manifest.Stat{}, nil, false
			e.Excluded = "hardlink of a secret (" + rule + ")"
			rep.Excluded = append(rep.Excluded, Item{rel, e.Excluded})
		}
	}
	return nil
}

// removeFromS deletes rel from S and the base, then restores its parent directory's mode
// and times in S and re-records the parent's S stat.
func (t *taker) removeFromS(rel string, entries []manifest.Entry, idx func(string) int) error {
	parentRel := filepath.Dir(rel)
	if parentRel == "." {
		parentRel = ""
	}
	sp := filepath.Join(t.s, parentRel)
	var wst unix.Stat_t
	if err := unix.Lstat(sp, &wst); err != nil {
		return fmt.Errorf("remove secret hardlink %q from snapshot: %w", rel, err)
	}
	pi := idx(parentRel)
	mode, mtime, atime := t.rootMode, t.rootMtime, t.rootAtime
	if pi >= 0 {
		mode = entries[pi].W.Mode &^ specialBits
		mtime = unix.NsecToTimespec(entries[pi].W.Mtime)
		atime = mtime
	}
	if err := unix.Chmod(sp, 0o700); err != nil {
		return fmt.Errorf("remove secret hardlink %q from snapshot: %w", rel, err)
	}
	if err := unix.Unlink(filepath.Join(t.s, rel)); err != nil {
		return fmt.Errorf("remove secret hardlink %q from snapshot: %w", rel, err)
	}
	if t.opts.KeepBase && t.baseMade {
		os.Remove(filepath.Join(t.opts.BaseDir, rel))
	}
	if err := unix.Chmod(sp, mode); err != nil {
		return fmt.Errorf("restore mode of %q in snapshot: %w", parentRel, err)
	}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, sp, []unix.Timespec{atime, mtime}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("restore times of %q in snapshot: %w", parentRel, err)
	}
	if pi >= 0 {
		var st unix.Stat_t
		if err := unix.Lstat(sp, &st); err != nil {
			return fmt.Errorf("stat %q in snapshot: %w", parentRel, err)
		}
		entries[pi].S = manifest.FromStat(&st)
	}
	return nil
}

func defaultWorkers(n int) int {
	if n > 0 {
		return n
	}
	n = runtime.NumCPU()
	if n < 2 {
		n = 2
	}
	if n > 8 {
		n = 8
	}
	return n
}
