package gitreview

import (
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
	changes, err := r.commitChanges(c)
	if err != nil {
		return rc, err
	}
	for _, ch := range changes {
		rc.Files++
		if ch.to.Mode == filemode.Submodule || ch.from.Mode == filemode.Submodule {
			rc.Submodules = append(rc.Submodules, ch.path+" -> "+ch.to.Hash.String())
			continue
		}
		before, err := r.blobOf(ch.from)
		if err != nil {
			return rc, err
		}
		after, err := r.blobOf(ch.to)
		if err != nil {
			return rc, err
		}
		a, d := diff.LineCounts(before, after)
		rc.Insertions += a
		rc.Deletions += d
	}
	return rc, nil
}

// Patch writes the unified diff of commit id (one of the review's commits) against its
// first parent: a "diff --git" header per file, binary files and gitlinks as one line.
// Paths are escaped (diff.Escape).
func (r *Review) Patch(out io.Writer, id string) error {
	c, err := object.GetCommit(r.obj, plumbing.NewHash(id))
	if err != nil {
		return fmt.Errorf("patch of commit %s: %w", id, err)
	}
	changes, err := r.commitChanges(c)
	if err != nil {
		return err
	}
	var b strings.Builder
	for _, ch := range changes {
		p := diff.Escape(ch.path)
		fmt.Fprintf(&b, "diff --git a/%s b/%s\n", p, p)
		if ch.to.Mode == filemode.Submodule || ch.from.Mode == filemode.Submodule {
			fmt.Fprintf(&b, "Submodule %s -> %s\n", p, ch.to.Hash)
			continue
		}
		before, err := r.blobOf(ch.from)
		if err != nil {
			return err
		}
		after, err := r.blobOf(ch.to)
		if err != nil {
			return err
		}
		if diff.IsBinary(before) || diff.IsBinary(after) {
			b.WriteString("Binary files differ\n")
			continue
		}
		from, to := "a/"+p, "b/"+p
		if ch.from.Hash.IsZero() {
			from = "/dev/null"
		}
		if ch.to.Hash.IsZero() {
			to = "/dev/null"
		}
		b.WriteString(udiff.Unified(from, to, string(before), string(after)))
	}
	_, err = io.WriteString(out, b.String())
	return err
}
