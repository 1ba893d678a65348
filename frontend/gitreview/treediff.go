package gitreview

import (
	"fmt"
	"path"
	"sort"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
)

// fileChange is one non-directory entry that differs between two trees: from or to is
// the zero entry when the path is absent on that side.
type fileChange struct {
	path     string
	from, to object.TreeEntry
}

// tree returns the decoded tree h (the zero hash is the empty tree), read once per review.
func (r *Review) tree(h plumbing.Hash) (map[string]object.TreeEntry, error) {
	if h.IsZero() {
		return nil, nil
	}
	if t, ok := r.trees[h]; ok {
		return t, nil
	}
	t, err := object.GetTree(r.obj, h)
	if err != nil {
		return nil, fmt.Errorf("read tree %s: %w", h, err)
	}
	m := make(map[string]object.TreeEntry, len(t.Entries))
	for _, e := range t.Entries {
		m[e.Name] = e
	}
	r.trees[h] = m
	return m, nil
}

// diffTrees appends to out the file changes between trees a and b (below dir), sorted by
// path, skipping every subtree whose id is equal on both sides (so a commit touching one
// file reads only the trees on its path).
func (r *Review) diffTrees(a, b plumbing.Hash, dir string, out *[]fileChange) error {
	if a == b {
		return nil
	}
	ta, err := r.tree(a)
	if err != nil {
		return err
	}
	tb, err := r.tree(b)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(ta)+len(tb))
	for n := range ta {
		names = append(names, n)
	}
	for n := range tb {
		if _, ok := ta[n]; !ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		x, y := ta[n], tb[n]
		if x.Hash == y.Hash && x.Mode == y.Mode {
			continue
		}
		p := path.Join(dir, n)
		var xs, ys plumbing.Hash // subtrees on each side
		if x.Mode == filemode.Dir {
			xs, x = x.Hash, object.TreeEntry{}
		}
		if y.Mode == filemode.Dir {
			ys, y = y.Hash, object.TreeEntry{}
		}
		if err := r.diffTrees(xs, ys, p, out); err != nil {
			return err
		}
		if x.Hash != y.Hash || x.Mode != y.Mode {
			*out = append(*out, fileChange{path: p, from: x, to: y})
		}
	}
	return nil
}

// commitChanges returns the file changes of c against its first parent (the empty tree
// for a root commit).
func (r *Review) commitChanges(c *object.Commit) ([]fileChange, error) {
	var parentTree plumbing.Hash
	if len(c.ParentHashes) > 0 {
		p, err := object.GetCommit(r.obj, c.ParentHashes[0])
		if err != nil {
			return nil, fmt.Errorf("commit %s: parent: %w", c.Hash, err)
		}
		parentTree = p.TreeHash
	}
	var out []fileChange
	if err := r.diffTrees(parentTree, c.TreeHash, "", &out); err != nil {
		return nil, fmt.Errorf("commit %s: %w", c.Hash, err)
	}
	return out, nil
}

// blobOf returns the content of a tree entry's blob (nil for the zero entry).
func (r *Review) blobOf(e object.TreeEntry) ([]byte, error) {
	if e.Hash.IsZero() {
		return nil, nil
	}
	obj, err := r.obj.EncodedObject(plumbing.BlobObject, e.Hash)
	if err != nil {
		return nil, err
	}
	return content(obj)
}
