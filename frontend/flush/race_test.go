package flush

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"brood.dev/brood/frontend/diff"
)

// An attacker swaps a W directory for a symlink to a directory outside W between the plan
// and the write: nothing may be written outside W and the error is ErrUnsafePath.
func TestSymlinkSwapBetweenPlanAndWrite(t *testing.T) {
	for _, point := range []string{"plan", "journaled"} {
		t.Run(point, func(t *testing.T) {
			f := newFixture(t, map[string]string{"sub/f.txt": "old\n", "sub/gone.txt": "x\n"})
			put(t, f.S, "sub/f.txt", "new\n", 0o644)
			put(t, f.S, "sub/added.txt", "added\n", 0o644)
			os.Remove(filepath.Join(f.S, "sub/gone.txt"))
			outside := filepath.Join(t.TempDir(), "outside")
			testHook = func(p string, n int) {
				if p != point {
					return
				}
				if err := os.Rename(filepath.Join(f.W, "sub"), outside); err != nil {
					t.Error(err)
				}
				if err := os.Symlink(outside, filepath.Join(f.W, "sub")); err != nil {
					t.Error(err)
				}
			}
			defer func() { testHook = nil }()
			before := treeState(t, f.W+"/sub/")
			_, err := Apply(ctx, f.sess, f.m, items(
				f.change(diff.KindModified, "sub/f.txt"),
				f.change(diff.KindAdded, "sub/added.txt"),
				f.change(diff.KindDeleted, "sub/gone.txt"),
			), Options{})
			if !errors.Is(err, ErrUnsafePath) {
				t.Fatalf("Apply: %v, want ErrUnsafePath", err)
			}
			sameTree(t, before, treeState(t, outside))
		})
	}
}

func TestUndoRefusesAfterWorkspaceChange(t *testing.T) {
	f := newFixture(t, map[string]string{"a": "a0", "b": "b0"})
	put(t, f.S, "a", "a1", 0o644)
	put(t, f.S, "b", "b1", 0o644)
	put(t, f.S, "c", "c1", 0o644)
	if _, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "a"),
		f.change(diff.KindModified, "b"), f.change(diff.KindAdded, "c")), Options{}); err != nil {
		t.Fatal(err)
	}
	put(t, f.W, "b", "developer", 0o644)
	res, err := Undo(ctx, f.sess)
	if !errors.Is(err, ErrChangedSinceApply) || len(res.Problems) != 1 || res.Problems[0].Path != "b" {
		t.Fatalf("Undo: %v %v, want ErrChangedSinceApply for b", err, res.Problems)
	}
	if read(t, f.W, "a") != "a1" || read(t, f.W, "c") != "c1" || read(t, f.W, "b") != "developer" {
		t.Errorf("refused undo changed W: %v", treeState(t, f.W))
	}
	put(t, f.W, "b", "b1", 0o644)
	if _, err := Undo(ctx, f.sess); err != nil {
		t.Fatal(err)
	}
	sameTree(t, map[string]string{"a": "-rw-r--r--:a0", "b": "-rw-r--r--:b0"}, treeState(t, f.W))
}

// An undo interrupted after its first revert is completed by running it again.
func TestUndoInterruptedIsCompleted(t *testing.T) {
	f := newFixture(t, map[string]string{"a": "a0", "b": "b0", "c": "c0"})
	before := treeState(t, f.W)
	for _, p := range []string{"a", "b", "c"} {
		put(t, f.S, p, p+"1", 0o600)
	}
	os.Remove(filepath.Join(f.S, "c"))
	put(t, f.S, "d/e", "new", 0o644)
	if _, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "a"), f.change(diff.KindModified, "b"),
		f.change(diff.KindDeleted, "c"), f.change(diff.KindAdded, "d/e")), Options{}); err != nil {
		t.Fatal(err)
	}
	func() {
		testHook = func(p string, n int) {
			if p == "reverted" {
				panic("interrupted")
			}
		}
		defer func() { testHook = nil; recover() }()
		Undo(ctx, f.sess)
		t.Fatal("hook not reached")
	}()
	if res, err := Undo(ctx, f.sess); err != nil || len(res.Applied) == 0 {
		t.Fatalf("second Undo: %v (%v)", err, res.Applied)
	}
	sameTree(t, before, treeState(t, f.W))
}

// With the session on another filesystem than W (tmpfs), prior content is copied into
// the journal and undo restores it from the copy.
func TestJournalOnOtherFilesystem(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "brood-flush-test-")
	if err != nil {
		t.Skipf("no /dev/shm: %v", err)
	}
	defer os.RemoveAll(shm)
	w := filepath.Join(t.TempDir(), "w")
	os.Mkdir(w, 0o755)
	put(t, w, "m", "m0", 0o640)
	put(t, w, "d", "d0", 0o604)
	syscallChmod(t, filepath.Join(w, "m"), 0o2750)
	t.Setenv("BROOD_STATE_DIR", shm)
	f := snapshotOf(t, w)
	before := treeState(t, w)
	put(t, f.S, "m", "m1", 0o640)
	os.Remove(filepath.Join(f.S, "d"))
	res, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "m"), f.change(diff.KindDeleted, "d")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(f.sess.JournalDir(), res.Tx, "b", "0")); err != nil || string(b) != "d0" {
		t.Errorf("journal copy of the deleted file: %q, %v", b, err)
	}
	if _, err := Undo(ctx, f.sess); err != nil {
		t.Fatal(err)
	}
	sameTree(t, before, treeState(t, w))
	if m := modeOf(t, w, "m"); m&os.ModeSetgid == 0 {
		t.Errorf("undo lost the setgid bit the developer had: %v", m)
	}
}
