package diff

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"

	"brood.dev/brood/frontend/manifest"
)

// Compute returns the changes S holds relative to the snapshot manifest m, with conflicts
// against what W holds now, sorted by path bytes. w and s are the roots of the workspace
// and the snapshot; the VM must have stopped (S must be quiescent).
//
// Both trees are walked in parallel relative to directory fds without following symlinks
// (openat2 RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS, fstatat AT_SYMLINK_NOFOLLOW). A file's
// content is read only when its stat (type, mode, size, mtime, ctime, inode) differs from
// the manifest in S — or, for such a file, to learn its base from W — so an untouched
// file is never opened. The host ctime cannot be forged from inside the VM.
//
// Errors name the tree and path; a file of W that changes while it is read makes its
// change a conflict, not an error.
func Compute(ctx context.Context, w, s string, m *manifest.Manifest, opts Options) ([]Change, error) {
	if m == nil {
		return nil, ErrNoManifest
	}
	return ComputeLoad(ctx, w, s, func() (*manifest.Manifest, error) { return m, nil }, opts)
}

// ComputeLoad is Compute with the manifest produced by load, which runs concurrently with
// the tree walks (decoding a large manifest then overlaps with the stat calls).
func ComputeLoad(ctx context.Context, w, s string, load func() (*manifest.Manifest, error), opts Options) ([]Change, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	rw, err := openRoot("W", w)
	if err != nil {
		return nil, err
	}
	defer rw.close()
	rs, err := openRoot("S", s)
	if err != nil {
		return nil, err
	}
	defer rs.close()

	workers := opts.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var (
		wg          sync.WaitGroup
		wn, sn      []node
		sDeep       []string
		werr, serr  error
		m           *manifest.Manifest
		merr        error
		caseFold    bool
		caseFoldErr error
	)
	wg.Add(3)
	go func() {
		defer wg.Done()
		if wn, _, werr = walkTree(ctx, rw, workers); werr != nil {
			cancel()
		}
	}()
	go func() {
		defer wg.Done()
		if sn, sDeep, serr = walkTree(ctx, rs, workers); serr != nil {
			cancel()
		}
	}()
	go func() {
		defer wg.Done()
		m, merr = load()
		if merr == nil && m == nil {
			merr = ErrNoManifest
		}
		if merr != nil {
			cancel()
		}
	}()
	switch opts.Case {
	case CaseInsensitive:
		caseFold = true
	case CaseAuto:
		caseFold, caseFoldErr = foldsCase(rw.fd)
	}
	wg.Wait()
	for _, err := range []error{merr, werr, serr, caseFoldErr} {
		if err != nil {
			return nil, fmt.Errorf("diff %q against %q: %w", s, w, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if opts.Stats != nil {
		opts.Stats.Manifest, opts.Stats.WalkedW, opts.Stats.WalkedS = len(m.Entries), len(wn), len(sn)
	}
	p := newPlanner(w, rw, rs, &opts, caseFold, wn, sDeep, workers)
	changes, err := p.plan(sortedEntries(m.Entries), wn, sn)
	if err != nil {
		return nil, fmt.Errorf("diff %q against %q: %w", s, w, err)
	}
	return changes, nil
}

// newPlanner returns the planner of one diff of W (root rw, walk wn) and S (root rs,
// deepS the directories its walk did not fully list).
func newPlanner(w string, rw, rs *root, opts *Options, caseFold bool, wn []node, sDeep []string, workers int) *planner {
	return &planner{
		src:       &treeContents{w: rw, s: rs, opts: opts},
		maxSize:   opts.maxSize(),
		protected: opts.Protected,
		caseFold:  caseFold,
		// Computed once per diff: W's git configs are refused for flush, so S cannot
		// change what they include.
		gitIncluded: gitIncludes(w, wn),

		allowUnsafeNames: opts.AllowUnsafeNames,
		prefetch:         prefetchDigests(workers),
		deepS:            sDeep,
		// git's derived files are reviewed as commits (package gitreview).
		gitDerivedOn: rootGitDir(wn),
	}
}

// sortedEntries returns entries sorted by Path with duplicates dropped (first kept),
// copying only when the input is not already in that shape (a manifest from Write is).
func sortedEntries(entries []manifest.Entry) []manifest.Entry {
	ok := true
	for i := 1; i < len(entries); i++ {
		if entries[i-1].Path >= entries[i].Path {
			ok = false
			break
		}
	}
	if ok {
		return entries
	}
	e := slices.Clone(entries)
	slices.SortStableFunc(e, func(a, b manifest.Entry) int { return strings.Compare(a.Path, b.Path) })
	return slices.CompactFunc(e, func(a, b manifest.Entry) bool { return a.Path == b.Path })
}

// treeContents reads content below the open roots, calling Options.OnOpen first.
type treeContents struct {
	w, s *root
	opts *Options
}

func (t *treeContents) root(tr Tree) *root {
	if tr == TreeW {
		return t.w
	}
	return t.s
}

func (t *treeContents) digest(tr Tree, p string, st manifest.Stat) (Digest, error) {
	if t.opts.OnOpen != nil {
		if err := t.opts.OnOpen(tr, p); err != nil {
			return Digest{}, err
		}
	}
	d, err := t.root(tr).digest(p, st)
	if err == nil && t.opts.Stats != nil {
		t.opts.Stats.Hashed.Add(1)
		t.opts.Stats.HashedBytes.Add(d.Size)
	}
	return d, err
}

func (t *treeContents) readlink(tr Tree, p string) (string, error) {
	if t.opts.OnOpen != nil {
		if err := t.opts.OnOpen(tr, p); err != nil {
			return "", err
		}
	}
	if t.opts.Stats != nil {
		t.opts.Stats.Readlinks.Add(1)
	}
	return t.root(tr).readlink(p)
}
