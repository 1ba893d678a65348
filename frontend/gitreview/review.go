package gitreview

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// Review is what the agent did to the workspace root's repository, as refs and commits.
type Review struct {
	// Refused is why the repository is not reviewed at all ("" when it is): the reason
	// names the file and is built from escaped names only.
	Refused string `json:"refused,omitempty"`
	// Refs lists every ref S moved or created, sorted by name.
	Refs []RefUpdate `json:"refs"`
	// Notes are refs or files seen but not reviewed (deleted refs, remote-tracking refs),
	// one line each, escaped.
	Notes []string `json:"notes,omitempty"`

	wDir, sDir string
	obj        *objects
	trees      map[plumbing.Hash]map[string]object.TreeEntry // decoded trees (Review.tree)
}

// RefUpdate is one ref the agent moved or created, with the commits W lacks.
type RefUpdate struct {
	Name string `json:"ref"` // as in S: "refs/heads/master", "refs/tags/v1", "HEAD"
	Old  string `json:"old"` // W's value (hex), "" when W has no such ref
	New  string `json:"new"` // S's value (hex): a commit, or an annotated tag
	// Commits are the commits reachable from New that W lacks, newest first (each
	// after all its children).
	Commits []Commit `json:"commits"`
	// Refused is why the ref is never applied ("" when it can be): a hostile tree, an
	// object that fails verification, a history that does not descend from Old, ...
	Refused string `json:"refused,omitempty"`
	// NotDescendant: W's ref Old is not an ancestor of New (the agent rewrote history).
	NotDescendant bool `json:"not_descendant,omitempty"`

	needed []plumbing.Hash // objects W lacks, in the order found
}

// Commit is one commit W lacks. Author and Message are raw (hostile) text: escape them
// for a terminal.
type Commit struct {
	ID         string   `json:"id"`
	Parents    []string `json:"parents"`
	Author     string   `json:"author"` // "Name <email>"
	Message    string   `json:"message"`
	Files      int      `json:"files"`
	Insertions int      `json:"insertions"`
	Deletions  int      `json:"deletions"`
	// Submodules lists the gitlinks (submodule commits) the commit adds or moves, as
	// "path -> commit".
	Submodules []string `json:"submodules,omitempty"`
}

// Close releases the pack files the review keeps open.
func (r *Review) Close() {
	if r != nil && r.obj != nil {
		r.obj.Storage.Close()
		r.obj.s.Close()
		r.obj.close()
	}
}

// Blocked returns the number of refs that are refused (the whole repository counting as
// one when it is).
func (r *Review) Blocked() int {
	if r == nil {
		return 0
	}
	n := 0
	if r.Refused != "" {
		n++
	}
	for _, u := range r.Refs {
		if u.Refused != "" {
			n++
		}
	}
	return n
}

// Empty reports whether there is nothing to show.
func (r *Review) Empty() bool {
	return r == nil || r.Refused == "" && len(r.Refs) == 0 && len(r.Notes) == 0
}

// WorktreeNote is the note of a review whose workspace's .git is a file (a linked
// worktree's or a submodule's "gitdir: PATH" pointer): no commits are reviewed there,
// and nothing is refused.
const WorktreeNote = "commits not reviewed: .git is a gitdir file (linked worktree)"

// Inspect reviews the repository at the root of the snapshot s against the one at the
// root of the workspace w. It returns nil when W has no .git (an agent's new repository
// is left to package diff), a Review with only WorktreeNote when W's .git is a file, a
// Review with Refused set when the repository cannot be
// reviewed, and an error only when W's own repository cannot be read.
func Inspect(w, s string) (*Review, error) {
	wDir, sDir := filepath.Join(w, ".git"), filepath.Join(s, ".git")
	wfi, err := os.Lstat(wDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", wDir, err)
	}
	r := &Review{wDir: wDir, sDir: sDir, trees: map[plumbing.Hash]map[string]object.TreeEntry{}}
	if !wfi.IsDir() {
		// Not a refusal: there is no repository here to review or to write to.
		r.Notes = []string{WorktreeNote}
		return r, nil
	}
	if why := repoProblem(wDir, sDir); why != "" {
		r.Refused = why
		return r, nil
	}
	wst, sst := openStore(wDir, false), openStore(sDir, true)
	if why := formatProblem(wst); why != "" {
		r.Refused = why
		return r, nil
	}
	r.obj = &objects{Storage: wst, s: sst, sDir: sDir, wDir: wDir,
		verified: map[plumbing.Hash]*plumbing.MemoryObject{}, inWMemo: map[plumbing.Hash]bool{}}
	// S's pack indexes are checked before go-git decodes them (idxSizeOK); they and W's
	// are decoded only when a changed ref needs an object.
	if err := checkIndexes(sDir); err != nil {
		r.Refused = "read the snapshot's packs: " + escapeErr(err)
		return r, nil
	}
	if err := r.findRefs(wst, sst); err != nil {
		r.Refused = "read the snapshot's refs: " + escapeErr(err)
		r.Refs = nil
		return r, nil
	}
	sort.Slice(r.Refs, func(i, j int) bool { return r.Refs[i].Name < r.Refs[j].Name })
	for i := range r.Refs {
		r.walkRef(&r.Refs[i])
	}
	return r, nil
}

// formatProblem refuses a W repository go-git cannot write to as brood does: another
// object format than SHA-1 or the reftable ref storage.
func formatProblem(wst *filesystem.Storage) string {
	cfg, err := wst.Config()
	if err != nil {
		return "read the workspace's .git/config: " + escapeErr(err)
	}
	if f := cfg.Raw.Section("extensions").Option("objectformat"); f != "" && !strings.EqualFold(f, "sha1") {
		return "the workspace's repository uses object format " + escapeText(f) + ": only SHA-1 is reviewed"
	}
	if f := cfg.Raw.Section("extensions").Option("refstorage"); f != "" && !strings.EqualFold(f, "files") {
		return "the workspace's repository stores refs as " + escapeText(f) + ": only loose and packed refs are reviewed"
	}
	return ""
}

// repoProblem refuses an S repository whose history brood cannot trust as a whole
// ("" when none): S/.git not a plain directory, a symlink or special file where git keeps
// refs and objects, grafts or replace refs (they rewrite history as git shows it), a
// shallow file or alternates that differ from W's.
func repoProblem(wDir, sDir string) string {
	sfi, err := os.Lstat(sDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "the snapshot has no .git: the agent removed the repository; nothing to review"
	case err != nil:
		return "read the snapshot's .git: " + escapeErr(err)
	case !sfi.IsDir():
		return "the snapshot's .git is not a directory"
	}
	for _, name := range []string{"HEAD", "packed-refs", "refs", "objects", "shallow", "info"} {
		if why := plainTree(sDir, name); why != "" {
			return why
		}
	}
	if fi, err := os.Lstat(filepath.Join(sDir, "packed-refs")); err == nil && fi.Size() > MaxPackedRefsBytes {
		return fmt.Sprintf("the snapshot's .git/packed-refs has %d bytes, over the %d byte cap (MaxPackedRefsBytes)", fi.Size(), MaxPackedRefsBytes)
	}
	if _, err := os.Lstat(filepath.Join(sDir, "info", "grafts")); err == nil {
		return "the snapshot's repository has .git/info/grafts: a grafted history is not reviewed"
	}
	if _, err := os.Lstat(filepath.Join(sDir, "refs", "replace")); err == nil {
		return "the snapshot's repository has refs/replace/: replaced objects are not reviewed"
	}
	for _, f := range []string{"shallow", filepath.Join("objects", "info", "alternates")} {
		wb, werr := os.ReadFile(filepath.Join(wDir, f))
		sb, serr := os.ReadFile(filepath.Join(sDir, f))
		if errors.Is(serr, fs.ErrNotExist) && errors.Is(werr, fs.ErrNotExist) {
			continue
		}
		if serr != nil || werr != nil || !bytes.Equal(wb, sb) {
			what := "a shallow history"
			if f != "shallow" {
				what = "borrowed object stores (alternates)"
			}
			return "the snapshot's .git/" + filepath.ToSlash(f) + " differs from the workspace's: " + what + " is not reviewed"
		}
	}
	return ""
}

// plainTree walks sDir/name without following symlinks and returns why it is refused
// ("" when it holds only directories and regular files, or is absent).
func plainTree(sDir, name string) string {
	root := filepath.Join(sDir, name)
	var why string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == root {
				return filepath.SkipAll
			}
			return err
		}
		if !d.Type().IsDir() && !d.Type().IsRegular() {
			rel, _ := filepath.Rel(sDir, p)
			why = "the snapshot's .git/" + escapeText(filepath.ToSlash(rel)) + " is a symlink or special file"
			return filepath.SkipAll
		}
		return nil
	})
	if err != nil && why == "" {
		return "read the snapshot's .git/" + name + ": " + escapeErr(err)
	}
	return why
}

// findRefs fills r.Refs with S's refs whose value differs from W's, and r.Notes with the
// refs not reviewed.
func (r *Review) findRefs(wst, sst *filesystem.Storage) error {
	iter, err := sst.IterReferences()
	if err != nil {
		return err
	}
	seen := map[plumbing.ReferenceName]bool{}
	err = iter.ForEach(func(ref *plumbing.Reference) error {
		if len(seen) >= MaxRefs {
			return fmt.Errorf("more than %d refs (MaxRefs)", MaxRefs)
		}
		if ref.Type() != plumbing.HashReference || seen[ref.Name()] {
			return nil
		}
		seen[ref.Name()] = true
		if ref.Name() == plumbing.HEAD {
			return nil // handled below with W's resolved HEAD
		}
		old, _ := wst.Reference(ref.Name())
		if old != nil && old.Type() == plumbing.HashReference && old.Hash() == ref.Hash() {
			return nil
		}
		r.addRef(string(ref.Name()), old, ref.Hash())
		return nil
	})
	if err != nil {
		return err
	}
	if head, err := sst.Reference(plumbing.HEAD); err == nil && head.Type() == plumbing.HashReference {
		old, _ := storer.ResolveReference(wst, plumbing.HEAD)
		if old == nil || old.Hash() != head.Hash() {
			r.addRef("HEAD", old, head.Hash())
		}
	}
	r.deletedRefs(wst, sst)
	return nil
}

// addRef records one moved or created ref, or a note when it is not a branch or tag.
func (r *Review) addRef(name string, old *plumbing.Reference, nw plumbing.Hash) {
	u := RefUpdate{Name: name, New: nw.String()}
	if old != nil && old.Type() == plumbing.HashReference {
		u.Old = old.Hash().String()
	}
	if why := refNameProblem(name); why != "" {
		if strings.HasPrefix(name, "refs/") && !strings.HasPrefix(name, "refs/heads/") &&
			!strings.HasPrefix(name, "refs/tags/") && refNameProblem("refs/heads/"+strings.TrimPrefix(name, "refs/")) == "" {
			r.Notes = append(r.Notes, "ref "+escapeText(name)+" moved: only branches, tags and HEAD are reviewed")
			return
		}
		u.Refused = why
	}
	r.Refs = append(r.Refs, u)
}

// deletedRefs notes W's branches and tags that S does not have (never applied), except
// brood's own refs/heads/brood/ branches.
func (r *Review) deletedRefs(wst, sst *filesystem.Storage) {
	iter, err := wst.IterReferences()
	if err != nil {
		return
	}
	iter.ForEach(func(ref *plumbing.Reference) error {
		n := string(ref.Name())
		if !strings.HasPrefix(n, "refs/heads/") && !strings.HasPrefix(n, "refs/tags/") || strings.HasPrefix(n, "refs/heads/brood/") {
			return nil // brood's own branches exist only in W
		}
		if _, err := sst.Reference(ref.Name()); errors.Is(err, plumbing.ErrReferenceNotFound) {
			r.Notes = append(r.Notes, "ref "+escapeText(n)+" is in the workspace but not in the snapshot (the agent deleted it, or you created it since): brood never deletes a ref")
		}
		return nil
	})
}
