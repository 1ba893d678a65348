package diff

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/manifest"
)

// node is one entry found by a tree walk: its relative path and lstat.
type node struct {
	path string
	st   manifest.Stat
}

// walker lists every entry below a root with a pool of goroutines sharing a stack of
// directories to read. Each directory is opened beneath the root without following
// symlinks; entries are lstat'ed with fstatat(dirfd, name, AT_SYMLINK_NOFOLLOW).
type walker struct {
	r *root

	mu      sync.Mutex
	cond    sync.Cond
	stack   []string // relative paths of directories still to read ("" = root)
	deep    []string // directories holding entries whose path is longer than maxPathLen
	pending int      // directories pushed and not yet finished
	err     error
}

// maxPathLen is the longest relative path the diff walks into or reads: PATH_MAX - 1
// (<linux/limits.h>, counting the terminating NUL). Deeper entries are an agent's trap
// (they cannot be opened by path); they are refused, never silently dropped.
const maxPathLen = 4095

// walkTree returns every entry below r (not the root itself), sorted by path bytes,
// using workers goroutines, and the directories whose entries it did not all list because
// their paths would exceed maxPathLen.
func walkTree(ctx context.Context, r *root, workers int) ([]node, []string, error) {
	w := &walker{r: r, stack: []string{""}, pending: 1}
	w.cond.L = &w.mu
	if workers < 1 {
		workers = 1
	}
	out := make([][]node, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = w.run(ctx)
		}()
	}
	wg.Wait()
	if w.err != nil {
		return nil, nil, w.err
	}
	n := 0
	for _, o := range out {
		n += len(o)
	}
	all := make([]node, 0, n)
	for _, o := range out {
		all = append(all, o...)
	}
	slices.SortFunc(all, func(a, b node) int { return strings.Compare(a.path, b.path) })
	slices.Sort(w.deep)
	return all, w.deep, nil
}

func (w *walker) run(ctx context.Context) []node {
	var found []node
	var names []string
	buf := make([]byte, 32<<10)
	for {
		w.mu.Lock()
		for len(w.stack) == 0 && w.pending > 0 && w.err == nil {
			w.cond.Wait()
		}
		if w.pending == 0 || w.err != nil {
			w.mu.Unlock()
			return found
		}
		dir := w.stack[len(w.stack)-1]
		w.stack = w.stack[:len(w.stack)-1]
		w.mu.Unlock()

		var subdirs []string
		var err error
		if err = ctx.Err(); err == nil {
			found, names, subdirs, err = w.readDir(dir, found, names[:0], buf)
		}

		w.mu.Lock()
		if err != nil && w.err == nil {
			w.err = err
		}
		w.stack = append(w.stack, subdirs...)
		w.pending += len(subdirs) - 1
		if w.pending == 0 || w.err != nil {
			w.cond.Broadcast()
		} else {
			for range subdirs {
				w.cond.Signal()
			}
		}
		w.mu.Unlock()
	}
}

// unreadable reports whether err is a permission error (EACCES, EPERM).
func unreadable(err error) bool {
	return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM)
}

// readDir lists dir, appends its entries to found and returns its subdirectories.
func (w *walker) readDir(dir string, found []node, names []string, buf []byte) ([]node, []string, []string, error) {
	fd, err := w.r.openBeneath(dir, unix.O_RDONLY|unix.O_DIRECTORY)
	if dir != "" && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) || errors.Is(err, unix.ELOOP)) {
		// Removed or replaced since its parent was read (W being edited): its entries are
		// gone from this walk; the parent's entry already records what it was.
		return found, names, nil, nil
	}
	if dir != "" && w.r.name == "W" && unreadable(err) {
		// The developer's own unreadable directory: the snapshot skipped it (manifest
		// Skipped), so nothing below it is compared, and S can never write there.
		return found, names, nil, nil
	}
	if err != nil {
		return found, names, nil, err
	}
	f := os.NewFile(uintptr(fd), w.r.name+":"+Escape(dir))
	defer f.Close()
	names, err = readNames(fd, names, buf)
	if err != nil {
		return found, names, nil, &os.PathError{Op: "getdents", Path: f.Name(), Err: err}
	}
	var subdirs []string
	prefix := ""
	if dir != "" {
		prefix = dir + "/"
	}
	deep := false
	for _, name := range names {
		if len(prefix)+len(name) > maxPathLen {
			deep = true // listed as the directory's refusal, never by its own name
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT {
				continue // removed since getdents (W being edited)
			}
			if w.r.name == "W" && unreadable(err) {
				continue // a directory the developer can list but not search: skipped too
			}
			return found, names, nil, &os.PathError{Op: "fstatat", Path: w.r.name + ":" + Escape(prefix+name), Err: err}
		}
		n := node{path: prefix + name, st: manifest.FromStat(&st)}
		found = append(found, n)
		if n.st.Type == manifest.TypeDir {
			subdirs = append(subdirs, n.path)
		}
	}
	if deep {
		w.mu.Lock()
		w.deep = append(w.deep, dir)
		w.mu.Unlock()
	}
	return found, names, subdirs, nil
}
