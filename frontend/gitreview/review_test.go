package gitreview

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func noJournal(string, string) error { return nil }

// The acceptance scenario: one agent commit on master comes back as
// brood/<id>/master; W's HEAD, master, index and config are untouched; fsck is clean;
// DeleteRef removes it.
func TestApplyCommitAsBranch(t *testing.T) {
	w, s := newRepo(t)
	before := snapshotFiles(t, w)
	id := agentCommit(t, s)
	r, err := Inspect(w, s)
	if err != nil {
		t.Fatal(err)
	}
	if r.Refused != "" || len(r.Refs) != 1 {
		t.Fatalf("review = %+v", r)
	}
	u := r.Refs[0]
	if u.Name != "refs/heads/master" || u.New != id || u.Refused != "" || len(u.Commits) != 1 {
		t.Fatalf("ref = %+v", u)
	}
	c := u.Commits[0]
	if c.ID != id || c.Author != "Dev <dev@example.com>" || c.Message != "agent work\n" || c.Files != 2 || c.Insertions != 2 || c.Deletions != 1 {
		t.Fatalf("commit = %+v", c)
	}
	if len(u.needed) != 4 { // commit, tree, two blobs
		t.Fatalf("needed %d objects, want 4", len(u.needed))
	}
	var journaled []string
	branch := BranchName("s1", u.Name)
	err = r.Apply(&u, branch, func(ref, v string) error { journaled = append(journaled, ref, v); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(journaled, []string{"refs/heads/brood/s1/master", id}) {
		t.Fatalf("journaled %q", journaled)
	}
	if got := git(t, w, "log", "--format=%H %s", "brood/s1/master", "-1"); got != id+" agent work" {
		t.Fatalf("git log = %q", got)
	}
	git(t, w, "fsck", "--strict", "--no-dangling")
	if after := snapshotFiles(t, w); !reflect.DeepEqual(before, after) {
		t.Fatalf("W's git files changed:\n%v\n%v", before, after)
	}
	if r3, _ := Inspect(w, s); len(r3.Notes) != 0 { // brood's own branch is no note
		t.Fatalf("notes after apply: %q", r3.Notes)
	}
	if st := git(t, w, "status", "--porcelain"); st != "" {
		t.Fatalf("git status = %q", st)
	}
	if err := r.Apply(&u, branch, noJournal); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second apply: %v", err)
	}
	removed, err := DeleteRef(w, branch, id)
	if err != nil || !removed {
		t.Fatalf("DeleteRef = %v, %v", removed, err)
	}
	if _, err := os.Stat(filepath.Join(w, ".git/refs/heads/brood")); !os.IsNotExist(err) {
		t.Fatalf("refs/heads/brood left behind: %v", err)
	}
	if out := git(t, w, "branch", "--list", "brood/*"); out != "" {
		t.Fatalf("branches = %q", out)
	}
	// Inspecting again after the apply: W has the objects now, the review is the same ref.
	git(t, w, "branch", "mine")
	if r2, _ := Inspect(w, s); len(r2.Refs) != 1 || len(r2.Refs[0].Commits) != 0 || r2.Refs[0].Refused != "" ||
		len(r2.Notes) != 1 || !strings.Contains(r2.Notes[0], "refs/heads/mine is in the workspace but not in the snapshot") {
		t.Fatalf("after apply: %+v", r2)
	}
}

func TestInspectNothing(t *testing.T) {
	w, s := newRepo(t)
	git(t, s, "status") // rewrites the index at most
	r, err := Inspect(w, s)
	if err != nil || !r.Empty() {
		t.Fatalf("review = %+v, %v", r, err)
	}
	if r, err := Inspect(t.TempDir(), t.TempDir()); r != nil || err != nil {
		t.Fatalf("no repository: %+v, %v", r, err)
	}
}

func TestDeleteRefMoved(t *testing.T) {
	w, s := newRepo(t)
	id := agentCommit(t, s)
	r, _ := Inspect(w, s)
	u := r.Refs[0]
	if err := r.Apply(&u, BranchName("s", u.Name), noJournal); err != nil {
		t.Fatal(err)
	}
	git(t, w, "update-ref", "refs/heads/brood/s/master", "HEAD")
	if removed, err := DeleteRef(w, "refs/heads/brood/s/master", id); removed || err == nil || !strings.Contains(err.Error(), "moved") {
		t.Fatalf("DeleteRef of a moved ref = %v, %v", removed, err)
	}
	if _, err := DeleteRef(w, "refs/heads/master", id); err == nil {
		t.Fatal("DeleteRef removed a branch outside brood/")
	}
}

func TestDetachedHeadAndTags(t *testing.T) {
	w, s := newRepo(t)
	git(t, s, "checkout", "-q", "--detach")
	writeFile(t, s, "c.txt", "c\n")
	git(t, s, "add", "-A")
	git(t, s, "commit", "-q", "-m", "detached")
	git(t, s, "tag", "-a", "v1", "-m", "release")
	git(t, s, "tag", "light")
	r, err := Inspect(w, s)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, u := range r.Refs {
		names = append(names, u.Name)
		if u.Refused != "" {
			t.Fatalf("%s refused: %s", u.Name, u.Refused)
		}
	}
	if !reflect.DeepEqual(names, []string{"HEAD", "refs/tags/light", "refs/tags/v1"}) {
		t.Fatalf("refs = %q", names)
	}
	for i := range r.Refs {
		if err := r.Apply(&r.Refs[i], BranchName("s", r.Refs[i].Name), noJournal); err != nil {
			t.Fatal(err)
		}
	}
	git(t, w, "fsck", "--strict", "--no-dangling")
	if got := git(t, w, "log", "-1", "--format=%s", "brood/s/tags/v1"); got != "detached" {
		t.Fatalf("tags/v1 = %q", got)
	}
	if got := git(t, w, "log", "-1", "--format=%s", "brood/s/HEAD"); got != "detached" {
		t.Fatalf("HEAD = %q", got)
	}
}

func TestWorktreeNoteAndRemovedRepoRefused(t *testing.T) {
	w, s := newRepo(t)
	os.RemoveAll(filepath.Join(s, ".git"))
	if r, _ := Inspect(w, s); !strings.Contains(r.Refused, "no .git") {
		t.Fatalf("removed: %+v", r)
	}
	w2 := t.TempDir()
	writeFile(t, w2, ".git", "gitdir: /elsewhere\n")
	if r, _ := Inspect(w2, s); r.Refused != "" || r.Blocked() != 0 || len(r.Refs) != 0 || !reflect.DeepEqual(r.Notes, []string{WorktreeNote}) {
		t.Fatalf("worktree: %+v", r)
	}
}

// TestSubmoduleGitlink: a gitlink (submodule commit) in a new tree is shown as such,
// needs no object and is applied with its tree.
func TestSubmoduleGitlink(t *testing.T) {
	w, s := newRepo(t)
	blob := git(t, s, "rev-parse", "HEAD:a.txt")
	sub := "4444444444444444444444444444444444444444"
	tree := looseObject(t, s, "tree", treeBody([3]string{"100644", "a.txt", blob}, [3]string{"160000", "lib", sub}), "")
	commitOnTree(t, s, tree, git(t, s, "rev-parse", "HEAD"))
	r, err := Inspect(w, s)
	if err != nil || len(r.Refs) != 1 || r.Refs[0].Refused != "" || len(r.Refs[0].Commits) != 1 {
		t.Fatalf("review = %+v, %v", r, err)
	}
	if c := r.Refs[0].Commits[0]; !reflect.DeepEqual(c.Submodules, []string{"lib -> " + sub}) || c.Files != 1 {
		t.Fatalf("commit = %+v", c)
	}
	if err := r.Apply(&r.Refs[0], BranchName("s", r.Refs[0].Name), noJournal); err != nil {
		t.Fatal(err)
	}
	git(t, w, "fsck", "--strict", "--no-dangling")
	var b strings.Builder
	if err := r.Patch(&b, r.Refs[0].Commits[0].ID); err != nil || !strings.Contains(b.String(), "Submodule lib -> "+sub) {
		t.Fatalf("patch %q, %v", b.String(), err)
	}
}

// TestFastForward: a branch is fast-forwarded to the applied commit only when it is not
// checked out and the commit descends from it; RestoreRef undoes it.
func TestFastForward(t *testing.T) {
	w, s := newRepo(t)
	git(t, w, "branch", "feature")
	git(t, s, "checkout", "-q", "-b", "feature")
	id := agentCommit(t, s)
	r, _ := Inspect(w, s)
	var u *RefUpdate
	for i := range r.Refs {
		if r.Refs[i].Name == "refs/heads/feature" {
			u = &r.Refs[i]
		}
	}
	if u == nil || u.Refused != "" {
		t.Fatalf("refs %+v", r.Refs)
	}
	if err := r.Apply(u, BranchName("s", u.Name), noJournal); err != nil {
		t.Fatal(err)
	}
	before := snapshotFiles(t, w)
	master, _ := RefValue(w, "refs/heads/master")
	if err := FastForward(w, "refs/heads/master", master, id); !errors.Is(err, ErrCheckedOut) {
		t.Fatalf("checked-out master: %v", err)
	}
	old, err := RefValue(w, "refs/heads/feature")
	if err != nil {
		t.Fatal(err)
	}
	if err := FastForward(w, "refs/heads/feature", id, id); err == nil {
		t.Fatal("fast-forwarded from a value the branch does not hold")
	}
	if err := FastForward(w, "refs/heads/feature", old, id); err != nil || git(t, w, "rev-parse", "feature") != id {
		t.Fatalf("fast-forward: %v", err)
	}
	if after := snapshotFiles(t, w); !reflect.DeepEqual(before, after) {
		t.Fatal("HEAD, master, index or config changed")
	}
	git(t, w, "fsck", "--strict", "--no-dangling")
	if err := FastForward(w, "refs/heads/feature", id, old); !errors.Is(err, ErrNotFastForward) {
		t.Fatalf("backwards: %v", err)
	}
	if err := RestoreRef(w, "refs/heads/feature", old, id); err != nil || git(t, w, "rev-parse", "feature") != old {
		t.Fatalf("restore: %v", err)
	}
	if err := RestoreRef(w, "refs/heads/feature", old, id); err == nil {
		t.Fatal("restored a ref that no longer holds the value")
	}
	if err := FastForward(w, "refs/heads/brood/s/feature", old, id); err == nil {
		t.Fatal("fast-forwarded a brood branch")
	}
}
