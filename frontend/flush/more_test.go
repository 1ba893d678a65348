package flush

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"brood.dev/brood/frontend/diff"
)

// The journal holds the plan and the prior content before W is touched.
func TestJournalBeforeWorkspace(t *testing.T) {
	f := newFixture(t, map[string]string{"m": "m0", "d": "d0"})
	put(t, f.S, "m", "m1", 0o644)
	os.Remove(filepath.Join(f.S, "d"))
	put(t, f.S, "n", "n1", 0o644)
	reached := false
	testHook = func(p string, n int) {
		if p != "journaled" {
			return
		}
		reached = true
		sameTree(t, map[string]string{"m": "-rw-r--r--:m0", "d": "-rw-r--r--:d0"}, treeState(t, f.W))
		j := &journal{dir: f.sess.JournalDir()}
		rec, err := j.readPlan("000001")
		if err != nil {
			t.Fatalf("plan not readable when W is first touched: %v", err)
		}
		for i, o := range rec.Ops {
			if !o.Backup {
				continue
			}
			b, err := os.ReadFile(filepath.Join(j.txDir("000001"), backupDir, itoa(i)))
			if err != nil || string(b) != map[string]string{"m": "m0", "d": "d0"}[o.Path] {
				t.Errorf("backup of %s: %q, %v", o.Path, b, err)
			}
		}
		if len(rec.Ops) != 3 {
			t.Errorf("plan has %d operations, want 3", len(rec.Ops))
		}
	}
	defer func() { testHook = nil }()
	if _, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "m"), f.change(diff.KindDeleted, "d"),
		f.change(diff.KindAdded, "n")), Options{}); err != nil {
		t.Fatal(err)
	}
	if !reached {
		t.Fatal("hook not reached")
	}
}

func itoa(i int) string { return string(rune('0' + i)) }

// The developer edits a file between the plan and the rename: the rename's re-check
// sees it, the developer's bytes stay, and the rest is applied.
func TestWorkspaceChangedDuringApply(t *testing.T) {
	f := newFixture(t, map[string]string{"a": "a0", "b": "b0"})
	put(t, f.S, "a", "a1", 0o644)
	put(t, f.S, "b", "b1", 0o644)
	put(t, f.S, "c", "c1", 0o644)
	testHook = func(p string, n int) {
		if p == "staged" {
			put(t, f.W, "a", "developer", 0o644)
			put(t, f.W, "c", "developer", 0o644)
		}
	}
	defer func() { testHook = nil }()
	res, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "a"), f.change(diff.KindModified, "b"),
		f.change(diff.KindAdded, "c")), Options{})
	if !errors.Is(err, ErrConflict) || len(res.Problems) != 2 {
		t.Fatalf("Apply: %v (%v), want 2 conflicts", err, res.Problems)
	}
	sameTree(t, map[string]string{"a": "-rw-r--r--:developer", "b": "-rw-r--r--:b1", "c": "-rw-r--r--:developer"}, treeState(t, f.W))
	if _, err := Undo(ctx, f.sess); err != nil {
		t.Fatal(err)
	}
	sameTree(t, map[string]string{"a": "-rw-r--r--:developer", "b": "-rw-r--r--:b0", "c": "-rw-r--r--:developer"}, treeState(t, f.W))
}

// Type changes: a file becomes a directory, a directory becomes a file, a symlink
// becomes a file; undo restores all three.
func TestTypeChanges(t *testing.T) {
	f := newFixture(t, map[string]string{"x": "file", "d/f": "inner", "l": "@x"})
	before := treeState(t, f.W)
	os.Remove(filepath.Join(f.S, "x"))
	put(t, f.S, "x/y", "now a dir", 0o644)
	os.RemoveAll(filepath.Join(f.S, "d"))
	put(t, f.S, "d", "now a file", 0o600)
	os.Remove(filepath.Join(f.S, "l"))
	put(t, f.S, "l", "now a file", 0o644)
	res, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindType, "x"), f.change(diff.KindAdded, "x/y"),
		f.change(diff.KindDeleted, "d/f"), f.change(diff.KindType, "d"), f.change(diff.KindType, "l")), Options{})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	sameTree(t, map[string]string{"x": "dir:drwxr-xr-x", "x/y": "-rw-r--r--:now a dir", "d": "-rw-------:now a file",
		"l": "-rw-r--r--:now a file"}, treeState(t, f.W))
	if len(res.Applied) != 5 {
		t.Errorf("applied %q", res.Applied)
	}
	if _, err := Undo(ctx, f.sess); err != nil {
		t.Fatal(err)
	}
	sameTree(t, before, treeState(t, f.W))
}

// A directory the apply created stays on undo when the developer has put a file in it;
// the rest is reverted without error. A path listed twice is refused.
func TestUndoKeepsDirectoryWithNewFiles(t *testing.T) {
	f := newFixture(t, map[string]string{"a": "a0"})
	put(t, f.S, "new/x", "x", 0o644)
	put(t, f.S, "a", "a1", 0o644)
	res, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindAdded, "new/x"), f.change(diff.KindModified, "a"),
		f.change(diff.KindModified, "a")), Options{})
	if !errors.Is(err, ErrRefused) || len(res.Applied) != 2 || len(res.Problems) != 1 {
		t.Fatalf("Apply: %v, applied %q", err, res.Applied)
	}
	put(t, f.W, "new/mine", "developer", 0o644)
	if _, err := Undo(ctx, f.sess); err != nil {
		t.Fatalf("Undo: %v", err)
	}
	sameTree(t, map[string]string{"a": "-rw-r--r--:a0", "new": "dir:drwxr-xr-x", "new/mine": "-rw-r--r--:developer"}, treeState(t, f.W))
}

// The review resolves a conflict (the developer deleted a file the agent modified) by
// taking the agent's version as an addition: written only while W has no such path.
func TestAddedOverDeveloperDeletion(t *testing.T) {
	f := newFixture(t, map[string]string{"a": "a0", "b": "b0"})
	put(t, f.S, "a", "agent", 0o644)
	put(t, f.S, "b", "agent", 0o644)
	os.Remove(filepath.Join(f.W, "a"))
	ca, cb := f.change(diff.KindModified, "a"), f.change(diff.KindModified, "b")
	ca.Kind, ca.OldHash, cb.Kind, cb.OldHash = diff.KindAdded, nil, diff.KindAdded, nil
	res, err := Apply(ctx, f.sess, f.m, items(ca, cb), Options{})
	if !errors.Is(err, ErrConflict) || len(res.Applied) != 1 || res.Applied[0] != "a" {
		t.Fatalf("Apply: %v, applied %q", err, res.Applied)
	}
	sameTree(t, map[string]string{"a": "-rw-r--r--:agent", "b": "-rw-r--r--:b0"}, treeState(t, f.W))
}

// A W file with a second hard link is backed up by copy (the shared inode could change
// through the other name); the other name keeps the old bytes, undo restores both.
func TestHardLinkedWorkspaceFile(t *testing.T) {
	f := newFixture(t, map[string]string{"h": "shared"})
	if err := os.Link(filepath.Join(f.W, "h"), filepath.Join(f.W, "h2")); err != nil {
		t.Fatal(err)
	}
	f = snapshotOf(t, f.W)
	put(t, f.S, "h", "agent", 0o644)
	res, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "h")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var st, bst syscallStat
	lstat(t, filepath.Join(f.W, "h2"), &st)
	lstat(t, filepath.Join(f.sess.JournalDir(), res.Tx, "b", "0"), &bst)
	if st.Ino == bst.Ino {
		t.Error("backup is a link to an inode W still names")
	}
	sameTree(t, map[string]string{"h": "-rw-r--r--:agent", "h2": "-rw-r--r--:shared"}, treeState(t, f.W))
	if _, err := Undo(ctx, f.sess); err != nil {
		t.Fatal(err)
	}
	sameTree(t, map[string]string{"h": "-rw-r--r--:shared", "h2": "-rw-r--r--:shared"}, treeState(t, f.W))
}
