package flush

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"brood.dev/brood/frontend/diff"
)

var ctx = context.Background()

func TestApplyAndUndo(t *testing.T) {
	f := newFixture(t, map[string]string{
		"mod.txt": "old\n", "del.txt": "bye\n", "exec.sh": "#!/bin/sh\n", "keep.txt": "same\n",
		"sub/link": "@../keep.txt", "olddir/gone.txt": "x",
	})
	os.Chmod(filepath.Join(f.W, "exec.sh"), 0o640)
	f = snapshotOf(t, f.W) // re-record modes
	before := treeState(t, f.W)

	put(t, f.S, "mod.txt", "new\n", 0o600)
	put(t, f.S, "a/b/added.txt", "hello\n", 0o644)
	os.Chmod(filepath.Join(f.S, "a"), 0o750)
	os.Remove(filepath.Join(f.S, "del.txt"))
	os.Chmod(filepath.Join(f.S, "exec.sh"), 0o755)
	os.Remove(filepath.Join(f.S, "sub/link"))
	os.Symlink("../mod.txt", filepath.Join(f.S, "sub/link"))
	os.Symlink("b/added.txt", filepath.Join(f.S, "a/rel"))
	os.RemoveAll(filepath.Join(f.S, "olddir"))

	res, err := Apply(ctx, f.sess, f.m, items(
		f.change(diff.KindModified, "mod.txt"),
		f.change(diff.KindAdded, "a/b/added.txt"),
		f.change(diff.KindDeleted, "del.txt"),
		f.change(diff.KindMode, "exec.sh"),
		f.change(diff.KindSymlink, "sub/link"),
		f.change(diff.KindSymlink, "a/rel"),
		f.change(diff.KindDeleted, "olddir/gone.txt"),
		f.change(diff.KindDeleted, "olddir"),
	), Options{})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if len(res.Applied) != 8 {
		t.Errorf("applied %q, want 8 paths", res.Applied)
	}
	want := map[string]string{
		"mod.txt": "-rw-------:new\n", "exec.sh": "-rwxr-xr-x:#!/bin/sh\n", "keep.txt": "-rw-r--r--:same\n",
		"sub": "dir:drwxr-xr-x", "sub/link": "link:../mod.txt",
		"a": "dir:drwxr-x---", "a/b": "dir:drwxr-xr-x", "a/b/added.txt": "-rw-r--r--:hello\n", "a/rel": "link:b/added.txt",
	}
	sameTree(t, want, treeState(t, f.W))
	if got, _ := os.ReadDir(f.W); len(got) != 5 {
		t.Errorf("W has %d entries, want 5 (no temp files)", len(got))
	}

	ures, err := Undo(ctx, f.sess)
	if err != nil {
		t.Fatalf("Undo: %v", err)
	}
	if len(ures.Applied) != 8 {
		t.Errorf("reverted %q, want 8 paths", ures.Applied)
	}
	sameTree(t, before, treeState(t, f.W))
	if _, err := Undo(ctx, f.sess); !errors.Is(err, ErrNothingToUndo) {
		t.Errorf("second Undo: %v, want ErrNothingToUndo", err)
	}
	sameTree(t, before, treeState(t, f.W))
}

func TestApplyConflictsAndRefusals(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "base\n", "b.txt": "base\n", "c.txt": "base\n"})
	put(t, f.S, "a.txt", "agent\n", 0o644)
	put(t, f.S, "b.txt", "agent\n", 0o644)
	put(t, f.S, "c.txt", "agent\n", 0o644)
	put(t, f.S, "new.txt", "agent\n", 0o644)
	put(t, f.S, "x.txt", "agent\n", 0o644)
	// The developer edits a.txt and creates new.txt in W after the snapshot.
	put(t, f.W, "a.txt", "developer\n", 0o644)
	put(t, f.W, "new.txt", "developer\n", 0o644)
	cConf := f.change(diff.KindConflict, "c.txt")
	cConf.Reason = "both changed"
	xRef := f.change(diff.KindAdded, "x.txt")
	xRef.Kind, xRef.Reason = diff.KindRefused, "protected path"

	res, err := Apply(ctx, f.sess, f.m, items(
		f.change(diff.KindModified, "a.txt"),
		f.change(diff.KindModified, "b.txt"),
		cConf, xRef,
		f.change(diff.KindAdded, "new.txt"),
	), Options{})
	if !errors.Is(err, ErrConflict) || !errors.Is(err, ErrRefused) {
		t.Fatalf("Apply error %v, want ErrConflict and ErrRefused", err)
	}
	if len(res.Applied) != 1 || res.Applied[0] != "b.txt" {
		t.Errorf("applied %q, want only b.txt", res.Applied)
	}
	got := map[string]bool{}
	for _, p := range res.Problems {
		got[p.Path] = true
		if !strings.Contains(p.Err.Error(), p.Path) {
			t.Errorf("problem %v does not name its path", p.Err)
		}
	}
	for _, p := range []string{"a.txt", "c.txt", "x.txt", "new.txt"} {
		if !got[p] {
			t.Errorf("no problem reported for %s", p)
		}
	}
	if read(t, f.W, "a.txt") != "developer\n" || read(t, f.W, "new.txt") != "developer\n" ||
		read(t, f.W, "c.txt") != "base\n" || !absent(t, f.W, "x.txt") || read(t, f.W, "b.txt") != "agent\n" {
		t.Errorf("W = %v", treeState(t, f.W))
	}
}

func TestRenameAddDoesNotDelete(t *testing.T) {
	f := newFixture(t, map[string]string{"old.go": "package x\n"})
	os.Rename(filepath.Join(f.S, "old.go"), filepath.Join(f.S, "new.go"))
	c := f.change(diff.KindAdded, "new.go")
	c.SameAs = "old.go"
	if _, err := Apply(ctx, f.sess, f.m, items(c), Options{}); err != nil {
		t.Fatal(err)
	}
	if read(t, f.W, "old.go") != "package x\n" || read(t, f.W, "new.go") != "package x\n" {
		t.Errorf("W = %v", treeState(t, f.W))
	}
}

func TestContentAndHashCheck(t *testing.T) {
	f := newFixture(t, map[string]string{"f.txt": "1\n2\n3\n"})
	put(t, f.S, "f.txt", "1\nTWO\nTHREE\n", 0o644)
	put(t, f.S, "g.txt", "agent\n", 0o644)
	sel := Item{Change: f.change(diff.KindModified, "f.txt"), Content: []byte("1\nTWO\n3\n")}
	bad := f.change(diff.KindAdded, "g.txt")
	bad.NewHash = sum([]byte("what the developer saw\n"))
	noHash := f.change(diff.KindAdded, "g.txt")
	noHash.Path, noHash.NewHash = "g.txt", nil
	res, err := Apply(ctx, f.sess, f.m, []Item{sel, {Change: bad}}, Options{})
	if !errors.Is(err, ErrHashMismatch) {
		t.Fatalf("Apply: %v, want ErrHashMismatch", err)
	}
	if read(t, f.W, "f.txt") != "1\nTWO\n3\n" {
		t.Errorf("hunk-selected content not written: %q", read(t, f.W, "f.txt"))
	}
	if !absent(t, f.W, "g.txt") || len(res.Applied) != 1 {
		t.Errorf("g.txt written despite hash mismatch; applied %q", res.Applied)
	}
	if ents, _ := os.ReadDir(f.W); len(ents) != 1 {
		t.Errorf("W has %d entries, want 1 (temp file left?)", len(ents))
	}
	if _, err := Apply(ctx, f.sess, f.m, items(noHash), Options{}); !errors.Is(err, ErrNoReviewedHash) {
		t.Errorf("Apply without NewHash: %v, want ErrNoReviewedHash", err)
	}
}

func TestSymlinkTargets(t *testing.T) {
	f := newFixture(t, map[string]string{"d/f": "x"})
	for name, target := range map[string]string{"d/abs": "/etc/passwd", "d/up": "../../outside",
		"d/dotdot": "e/../../..", "top": "..", "d/ok": "../d/f", "d/ok2": "f"} {
		os.Symlink(target, filepath.Join(f.S, name))
	}
	var cs []diff.Change
	for _, p := range []string{"d/abs", "d/up", "d/dotdot", "top", "d/ok", "d/ok2"} {
		cs = append(cs, f.change(diff.KindSymlink, p))
	}
	res, err := Apply(ctx, f.sess, f.m, items(cs...), Options{})
	if !errors.Is(err, ErrSymlinkTarget) {
		t.Fatalf("Apply: %v, want ErrSymlinkTarget", err)
	}
	if len(res.Problems) != 4 {
		t.Errorf("problems %v, want 4", res.Problems)
	}
	for _, p := range res.Problems {
		if msg := p.Err.Error(); !strings.Contains(msg, p.Path) || strings.Contains(msg, "passwd") {
			t.Errorf("error %q must name the path and not the target", msg)
		}
	}
	if !strings.Contains(res.Problems[0].Err.Error()+res.Problems[1].Err.Error()+res.Problems[2].Err.Error()+res.Problems[3].Err.Error(), "absolute") {
		t.Errorf("no problem names the target class absolute: %v", res.Problems)
	}
	for _, p := range []string{"d/abs", "d/up", "d/dotdot", "top"} {
		if !absent(t, f.W, p) {
			t.Errorf("%s was created", p)
		}
	}
	if l, _ := os.Readlink(filepath.Join(f.W, "d/ok")); l != "../d/f" {
		t.Errorf("d/ok -> %q", l)
	}
	if l, _ := os.Readlink(filepath.Join(f.W, "d/ok2")); l != "f" {
		t.Errorf("d/ok2 -> %q", l)
	}
}

func TestModesMaskedAndOwner(t *testing.T) {
	f := newFixture(t, map[string]string{"tool": "bin"})
	put(t, f.S, "tool", "new bin", 0o644)
	os.Chmod(filepath.Join(f.S, "tool"), 0o4755|os.ModeSetuid)
	syscall.Chmod(filepath.Join(f.S, "tool"), 0o6755)
	put(t, f.S, "added", "x", 0o644)
	syscall.Chmod(filepath.Join(f.S, "added"), 0o3777)
	if os.Geteuid() == 0 {
		os.Chown(filepath.Join(f.S, "added"), 1234, 1234)
	}
	c1, c2 := f.change(diff.KindModified, "tool"), f.change(diff.KindAdded, "added")
	if c1.NewMode&0o7000 == 0 || c2.NewMode&0o7000 == 0 {
		t.Fatalf("fixture: special bits not set in S (%o, %o)", c1.NewMode, c2.NewMode)
	}
	if _, err := Apply(ctx, f.sess, f.m, items(c1, c2), Options{}); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]uint32{"tool": 0o755, "added": 0o777} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(f.W, p), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&0o7777 != want {
			t.Errorf("%s mode %o, want %o", p, st.Mode&0o7777, want)
		}
		if int(st.Uid) != os.Geteuid() || int(st.Gid) != os.Getegid() {
			t.Errorf("%s owned by %d:%d, want the invoking user %d:%d", p, st.Uid, st.Gid, os.Geteuid(), os.Getegid())
		}
	}
}

// A path excluded from the snapshot (a secret) is absent from S: a change claiming to
// delete or replace it is refused and W keeps it.
func TestExcludedPathNeverTouched(t *testing.T) {
	f := newFixture(t, map[string]string{".env": "TOKEN=1\n", "a": "a"})
	os.Remove(filepath.Join(f.S, ".env"))
	f.m.Lookup(".env").Excluded = ".env"
	_, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindDeleted, ".env")), Options{})
	if !errors.Is(err, ErrRefused) || read(t, f.W, ".env") != "TOKEN=1\n" {
		t.Fatalf("Apply: %v; .env = %q", err, read(t, f.W, ".env"))
	}
}
