package gitreview

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/aymanbagabas/go-udiff"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	"brood.dev/brood/frontend/diff"
)

// escapeText renders hostile text (a ref name, an author, a message line) for a terminal.
func escapeText(s string) string { return diff.Escape(s) }

// escapeErr renders an error's text for a terminal.
func escapeErr(err error) string { return diff.Escape(err.Error()) }

// content returns an object's bytes.
func content(obj plumbing.EncodedObject) ([]byte, error) {
	r, err := obj.Reader()
	if err != nil {
		return nil, fmt.Errorf("read object %s: %w", obj.Hash(), err)
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, MaxObjectSize))
}

// describe returns the Commit of c with its diffstat against its first parent (or the
// empty tree for a root commit).
func (r *Review) describe(c *object.Commit) (Commit, error) {
	rc := Commit{ID: c.Hash.String(), Author: c.Author.Name + " <" + c.Author.Email + ">", Message: c.Message}
	for _, p := range c.ParentHashes {
		rc.Parents = append(rc.Parents, p.String())
	}
	changes, err := r.changes(c)
	if err != nil {
		return rc, err
	}
	for _, ch := range changes {
		rc.Files++
		if ch.To.TreeEntry.Mode == filemode.Submodule || ch.From.TreeEntry.Mode == filemode.Submodule {
			rc.Submodules = append(rc.Submodules, ch.To.Name+" -> "+ch.To.TreeEntry.Hash.String())
			continue
		}
		before, after, err := r.blobs(ch)
		if err != nil {
			return rc, err
		}
		a, d := lineCounts(before, after)
		rc.Insertions += a
		rc.Deletions += d
	}
	return rc, nil
}

// changes returns the tree changes of c against its first parent.
func (r *Review) changes(c *object.Commit) (object.Changes, error) {
	to, err := object.GetTree(r.obj, c.TreeHash)
	if err != nil {
		return nil, fmt.Errorf("commit %s: tree: %w", c.Hash, err)
	}
	var from *object.Tree
	if len(c.ParentHashes) > 0 {
		p, err := object.GetCommit(r.obj, c.ParentHashes[0])
		if err != nil {
			return nil, fmt.Errorf("commit %s: parent: %w", c.Hash, err)
		}
		if from, err = object.GetTree(r.obj, p.TreeHash); err != nil {
			return nil, fmt.Errorf("commit %s: parent tree: %w", c.Hash, err)
		}
	}
	ch, err := object.DiffTreeWithOptions(context.Background(), from, to, nil)
	if err != nil {
		return nil, fmt.Errorf("commit %s: diff trees: %w", c.Hash, err)
	}
	return ch, nil
}

// blobs returns the contents before and after a change (nil for an absent side).
func (r *Review) blobs(ch *object.Change) (before, after []byte, err error) {
	read := func(e object.ChangeEntry) ([]byte, error) {
		if e.Name == "" && e.TreeEntry.Hash.IsZero() {
			return nil, nil
		}
		obj, err := r.obj.EncodedObject(plumbing.BlobObject, e.TreeEntry.Hash)
		if err != nil {
			return nil, err
		}
		return content(obj)
	}
	if before, err = read(ch.From); err != nil {
		return nil, nil, err
	}
	after, err = read(ch.To)
	return before, after, err
}

// lineCounts counts the lines added and deleted between two contents; binary contents
// (a NUL byte, diff.IsBinary) count no lines.
func lineCounts(before, after []byte) (added, deleted int) {
	if diff.IsBinary(before) || diff.IsBinary(after) || bytes.Equal(before, after) {
		return 0, 0
	}
	for _, e := range udiff.Lines(string(before), string(after)) {
		deleted += strings.Count(string(before[e.Start:e.End]), "\n")
		if e.End > e.Start && before[e.End-1] != '\n' {
			deleted++
		}
		added += strings.Count(e.New, "\n")
		if e.New != "" && !strings.HasSuffix(e.New, "\n") {
			added++
		}
	}
	return added, deleted
}

// Patch writes the unified diff of commit id (one of the review's commits) against its
// first parent: a "diff --git" header per file, binary files and gitlinks as one line.
// Paths are escaped (diff.Escape).
func (r *Review) Patch(out io.Writer, id string) error {
	c, err := object.GetCommit(r.obj, plumbing.NewHash(id))
	if err != nil {
		return fmt.Errorf("patch of commit %s: %w", id, err)
	}
	changes, err := r.changes(c)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, ch := range changes {
		from, to := ch.From.Name, ch.To.Name
		if from == "" {
			from = to
		}
		if to == "" {
			to = from
		}
		fmt.Fprintf(&b, "diff --git a/%s b/%s\n", diff.Escape(from), diff.Escape(to))
		if ch.To.TreeEntry.Mode == filemode.Submodule || ch.From.TreeEntry.Mode == filemode.Submodule {
			fmt.Fprintf(&b, "Submodule %s -> %s\n", diff.Escape(to), ch.To.TreeEntry.Hash)
			continue
		}
		before, after, err := r.blobs(ch)
		if err != nil {
			return err
		}
		if diff.IsBinary(before) || diff.IsBinary(after) {
			b.WriteString("Binary files differ\n")
			continue
		}
		b.WriteString(udiff.Unified("a/"+diff.Escape(from), "b/"+diff.Escape(to), string(before), string(after)))
	}
	_, err = io.WriteString(out, b.String())
	return err
}
