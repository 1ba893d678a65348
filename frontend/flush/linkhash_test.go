package flush

import (
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"brood.dev/brood/frontend/diff"
)

// TestRecreatedSymlinkApplies: a W symlink recreated with its snapshot-time link text
// (manifest LinkHash) still counts as the base; one with another text is a conflict.
func TestRecreatedSymlinkApplies(t *testing.T) {
	f := newFixture(t, map[string]string{"a.txt": "a", "b.txt": "b", "l1": "@a.txt", "l2": "@a.txt"})
	sum := sha256.Sum256([]byte("a.txt"))
	for i := range f.m.Entries {
		if e := &f.m.Entries[i]; e.Path == "l1" || e.Path == "l2" {
			e.LinkHash = sum[:]
		}
	}
	relink := func(root, l, target string) {
		t.Helper()
		os.Remove(filepath.Join(root, l))
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	relink(f.S, "l1", "b.txt")
	relink(f.S, "l2", "b.txt")
	relink(f.W, "l1", "a.txt")
	relink(f.W, "l2", "other")
	res, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindSymlink, "l1"), f.change(diff.KindSymlink, "l2")), Options{})
	if !errors.Is(err, ErrConflict) || len(res.Problems) != 1 || res.Problems[0].Path != "l2" {
		t.Errorf("apply: %v, problems %+v; want only l2 in conflict", err, res.Problems)
	}
	if got, _ := os.Readlink(filepath.Join(f.W, "l1")); got != "b.txt" {
		t.Errorf("l1 -> %q, want b.txt", got)
	}
}
