package gitreview

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"

	"brood.dev/brood/internal/atomicfile"
)

// ErrNotFastForward is returned (wrapped) by FastForward when the target does not
// descend from the branch's commit.
var ErrNotFastForward = errors.New("not a fast-forward")

// ErrCheckedOut is returned (wrapped) by FastForward for a branch that W's HEAD or a
// linked worktree's HEAD names: moving it would need the index and working tree updated,
// which brood never writes.
var ErrCheckedOut = errors.New("branch is checked out")

// FastForward moves branch (a full name below refs/heads/, not one of brood's own) in the
// repository at the root of workspace w from old to target (both hex; W's store must
// hold target, as after Apply). It refuses unless the branch holds old, target descends
// from old (ErrNotFastForward) and no HEAD of W or its linked worktrees names the branch
// (ErrCheckedOut). The ref is rewritten as a loose ref under git's lock file
// (<ref>.lock), after checking under the lock that it still holds old.
func FastForward(w, branch, old, target string) error {
	gitDir := filepath.Join(w, ".git")
	if refNameProblem(branch) != "" || !strings.HasPrefix(branch, "refs/heads/") || strings.HasPrefix(branch, "refs/heads/brood/") {
		return fmt.Errorf("fast-forward %s: not a branch of yours", escapeText(branch))
	}
	if err := checkedOut(gitDir, branch); err != nil {
		return err
	}
	st := openStore(gitDir, false)
	ok := descends(st, plumbing.NewHash(target), plumbing.NewHash(old))
	st.Close()
	if !ok {
		return fmt.Errorf("fast-forward %s from %s to %s: %w", escapeText(branch), old, target, ErrNotFastForward)
	}
	return swapRef(gitDir, branch, old, target)
}

// RefValue returns the commit (hex) the ref name of the repository at the root of
// workspace w points at, loose or packed.
func RefValue(w, name string) (string, error) {
	st := openStore(filepath.Join(w, ".git"), false)
	defer st.Close()
	ref, err := st.Reference(plumbing.ReferenceName(name))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", escapeText(name), err)
	}
	return ref.Hash().String(), nil
}

// RestoreRef sets branch of workspace w back to old when it still holds value (the undo
// of FastForward); a branch moved since is left as it is, with an error.
func RestoreRef(w, branch, old, value string) error {
	if refNameProblem(branch) != "" || !strings.HasPrefix(branch, "refs/heads/") {
		return fmt.Errorf("restore %s: not a branch", escapeText(branch))
	}
	return swapRef(filepath.Join(w, ".git"), branch, value, old)
}

// checkedOut returns ErrCheckedOut when HEAD of gitDir, or of one of its linked worktrees
// (worktrees/<name>/HEAD), is the symbolic ref "ref: <branch>".
func checkedOut(gitDir, branch string) error {
	heads, _ := filepath.Glob(filepath.Join(gitDir, "worktrees", "*", "HEAD"))
	for _, h := range append([]string{filepath.Join(gitDir, "HEAD")}, heads...) {
		b, err := os.ReadFile(h)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("fast-forward %s: read %s: %w", escapeText(branch), h, err)
		}
		if strings.TrimSpace(string(b)) == "ref: "+branch {
			return fmt.Errorf("fast-forward %s: %w (%s); run git merge --ff-only there instead", escapeText(branch), ErrCheckedOut, h)
		}
	}
	return nil
}

// descends reports whether old is target or one of its ancestors in store s, walking at
// most MaxAncestryWalk commits.
func descends(s storer.EncodedObjectStorer, target, old plumbing.Hash) bool {
	seen := map[plumbing.Hash]bool{}
	queue := []plumbing.Hash{target}
	for len(queue) > 0 && len(seen) < MaxAncestryWalk {
		h := queue[0]
		queue = queue[1:]
		if h == old {
			return true
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		c, err := object.GetCommit(s, h)
		if err != nil {
			continue
		}
		queue = append(queue, c.ParentHashes...)
	}
	return false
}

// swapRef sets the loose ref name of gitDir to to when it resolves to from: under
// <name>.lock (O_EXCL, as git locks refs), re-read, written, fsync'd and renamed into
// place. A ref only in packed-refs gets a loose file, which git reads first.
func swapRef(gitDir, name, from, to string) error {
	p := filepath.Join(gitDir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("update %s: %w", escapeText(name), err)
	}
	lock, err := os.OpenFile(p+".lock", os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("update %s: %w", escapeText(name), err)
	}
	defer os.Remove(p + ".lock")
	st := openStore(gitDir, false)
	cur, err := st.Reference(plumbing.ReferenceName(name))
	st.Close()
	if err != nil || cur.Hash().String() != from {
		lock.Close()
		return fmt.Errorf("update %s: it changed since it was checked; left as it is", escapeText(name))
	}
	err = writeRefLock(lock, to)
	if err == nil {
		err = os.Rename(p+".lock", p)
	}
	if err != nil {
		return fmt.Errorf("update %s: %w", escapeText(name), err)
	}
	return atomicfile.SyncDir(filepath.Dir(p))
}
