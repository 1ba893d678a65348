package gitreview

import (
	"errors"
	"fmt"
	"path"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// refWalk is the state of reviewing one ref.
type refWalk struct {
	r       *Review
	u       *RefUpdate
	seen    map[plumbing.Hash]bool // objects W lacks already recorded in u.needed
	checked map[plumbing.Hash]bool // trees W lacks already checked
	border  []plumbing.Hash        // commits W has that new commits point at
}

// errRefused carries a refusal reason (escaped text) up the walk.
type errRefused string

func (e errRefused) Error() string { return string(e) }

// walkRef finds u's commits W lacks, verifies and checks them, and decides whether u
// descends from W's value. Any problem becomes u.Refused.
func (r *Review) walkRef(u *RefUpdate) {
	if u.Refused != "" {
		return
	}
	w := &refWalk{r: r, u: u, seen: map[plumbing.Hash]bool{}, checked: map[plumbing.Hash]bool{}}
	err := w.walk()
	var refused errRefused
	switch {
	case errors.As(err, &refused):
		u.Refused = string(refused)
	case err != nil:
		u.Refused = "ref " + escapeText(u.Name) + ": " + escapeErr(err)
	}
	if err != nil {
		u.needed = nil
		if !u.NotDescendant {
			u.Commits = nil
		}
	}
}

func (w *refWalk) walk() error {
	tip, err := w.peel(plumbing.NewHash(w.u.New), true)
	if err != nil {
		return err
	}
	var commits []*object.Commit
	queue := []plumbing.Hash{tip}
	visited := map[plumbing.Hash]bool{}
	for len(queue) > 0 {
		h := queue[0]
		queue = queue[1:]
		if visited[h] {
			continue
		}
		visited[h] = true
		if w.r.obj.inW(h) {
			w.border = append(w.border, h)
			continue
		}
		c, err := w.newCommit(h)
		if err != nil {
			return err
		}
		commits = append(commits, c)
		queue = append(queue, c.ParentHashes...)
	}
	for _, c := range commits {
		if err := w.checkTree(c.TreeHash, ""); err != nil {
			return err
		}
	}
	for _, c := range commits {
		rc, err := w.r.describe(c)
		if err != nil {
			return err
		}
		w.u.Commits = append(w.u.Commits, rc)
	}
	return w.checkDescends()
}

// newCommit reads and verifies the commit h that W lacks.
func (w *refWalk) newCommit(h plumbing.Hash) (*object.Commit, error) {
	obj, err := w.need(h)
	if errors.Is(err, plumbing.ErrObjectNotFound) {
		return nil, errRefused(fmt.Sprintf("ref %s: commit %s is missing from the snapshot: a shallow or incomplete history is not applied", escapeText(w.u.Name), h))
	}
	if err != nil {
		return nil, err
	}
	if obj.Type() != plumbing.CommitObject {
		return nil, errRefused(fmt.Sprintf("ref %s: object %s is a %s, not a commit", escapeText(w.u.Name), h, obj.Type()))
	}
	c, err := object.DecodeCommit(w.r.obj, obj)
	if err != nil {
		return nil, fmt.Errorf("decode commit %s: %w", h, err)
	}
	return c, nil
}

// need returns the object h and, when W lacks it, verifies it and records it as needed.
func (w *refWalk) need(h plumbing.Hash) (plumbing.EncodedObject, error) {
	obj, err := w.r.obj.EncodedObject(plumbing.AnyObject, h)
	if err != nil {
		return nil, err
	}
	if !w.seen[h] && !w.r.obj.inW(h) {
		w.seen[h] = true
		w.u.needed = append(w.u.needed, h)
	}
	return obj, nil
}

// peel follows annotated tags from h to the commit they name (recording the tag objects
// W lacks when record), at most 8 deep.
func (w *refWalk) peel(h plumbing.Hash, record bool) (plumbing.Hash, error) {
	for range 8 {
		var obj plumbing.EncodedObject
		var err error
		if record {
			obj, err = w.need(h)
		} else {
			obj, err = w.r.obj.EncodedObject(plumbing.AnyObject, h)
		}
		if err != nil {
			return h, err
		}
		switch obj.Type() {
		case plumbing.CommitObject:
			return h, nil
		case plumbing.TagObject:
			t, err := object.DecodeTag(w.r.obj, obj)
			if err != nil {
				return h, fmt.Errorf("decode tag %s: %w", h, err)
			}
			h = t.Target
		default:
			return h, errRefused(fmt.Sprintf("ref %s: names a %s, not a commit", escapeText(w.u.Name), obj.Type()))
		}
	}
	return h, errRefused("ref " + escapeText(w.u.Name) + ": tags nested more than 8 deep")
}

// checkTree checks the tree h (at path dir) that a new commit holds, and below it every
// tree W lacks: entry names, symlink targets, known modes; it records the objects W
// lacks. Gitlinks need no object.
func (w *refWalk) checkTree(h plumbing.Hash, dir string) error {
	if w.checked[h] || w.r.obj.inW(h) {
		return nil
	}
	w.checked[h] = true
	obj, err := w.need(h)
	if err != nil {
		return err
	}
	t, err := object.DecodeTree(w.r.obj, obj)
	if err != nil {
		return fmt.Errorf("decode tree %s: %w", h, err)
	}
	for _, e := range t.Entries {
		p := path.Join(dir, e.Name)
		if why := entryNameProblem(e.Name, p); why != "" {
			return errRefused(why)
		}
		if err := w.checkEntry(e, p); err != nil {
			return err
		}
	}
	return nil
}

// checkEntry checks one tree entry at path p by its mode.
func (w *refWalk) checkEntry(e object.TreeEntry, p string) error {
	switch e.Mode {
	case filemode.Dir:
		return w.checkTree(e.Hash, p)
	case filemode.Submodule:
		return nil
	case filemode.Symlink:
		obj, err := w.need(e.Hash)
		if err != nil {
			return err
		}
		target, err := content(obj)
		if err != nil {
			return err
		}
		if why := linkTargetProblem(p, string(target)); why != "" {
			return errRefused(why)
		}
		return nil
	case filemode.Regular, filemode.Executable, filemode.Deprecated:
		if w.r.obj.inW(e.Hash) {
			return nil // W's own blob: nothing to read or copy
		}
		_, err := w.need(e.Hash)
		return err
	}
	return errRefused(fmt.Sprintf("tree entry %s: unknown mode %o", escapeText(p), uint32(e.Mode)))
}

// checkDescends refuses u when W has the ref and its commit is not an ancestor of (or
// equal to) a commit u's history reaches in W.
func (w *refWalk) checkDescends() error {
	if w.u.Old == "" {
		return nil
	}
	old, err := w.peel(plumbing.NewHash(w.u.Old), false)
	if err != nil {
		return fmt.Errorf("read W's %s: %w", w.u.Name, err)
	}
	seen := map[plumbing.Hash]bool{}
	queue := append([]plumbing.Hash(nil), w.border...)
	for len(queue) > 0 && len(seen) < MaxAncestryWalk {
		h := queue[0]
		queue = queue[1:]
		if h == old {
			return nil
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		c, err := object.GetCommit(w.r.obj.Storage, h)
		if err != nil {
			continue // beyond a shallow boundary of W itself
		}
		queue = append(queue, c.ParentHashes...)
	}
	w.u.NotDescendant = true
	return errRefused(fmt.Sprintf("ref %s: not a descendant of the workspace's %s (%s): the agent rewrote history; not applied",
		escapeText(w.u.Name), escapeText(w.u.Name), w.u.Old))
}
