package diff_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/snapshot"
)

// TestRecreatedSymlinkNoConflict: a W symlink recreated with the same link text (new
// inode and ctime, as brood undo does) is not a W change, so S's retarget of it is a
// plain symlink change, not a conflict; S recreating a link with its old text is no
// change at all; a W link given another text is still a conflict.
func TestRecreatedSymlinkNoConflict(t *testing.T) {
	dir := t.TempDir()
	w, s := filepath.Join(dir, "w"), filepath.Join(dir, "s")
	if err := os.Mkdir(w, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := difftest.WriteFiles(w, map[string]string{"a.txt": "a", "b.txt": "b"}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"inside_link", "same_in_s", "w_retargeted"} {
		if err := os.Symlink("a.txt", filepath.Join(w, l)); err != nil {
			t.Fatal(err)
		}
	}
	m, _, err := snapshot.Take(context.Background(), w, s, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	relink := func(root, l, target string) {
		t.Helper()
		if err := os.Remove(filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	relink(s, "inside_link", "b.txt")
	relink(w, "inside_link", "a.txt") // undo: same text, new inode
	relink(s, "same_in_s", "a.txt")
	relink(s, "w_retargeted", "b.txt")
	relink(w, "w_retargeted", "b.txt.orig")
	got, err := diff.Compute(context.Background(), w, s, m, diff.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]diff.Kind{}
	for _, c := range got {
		kinds[c.Path] = c.Kind
	}
	want := map[string]diff.Kind{"inside_link": diff.KindSymlink, "w_retargeted": diff.KindConflict}
	if len(got) != len(want) {
		t.Errorf("changes %+v, want %v", got, want)
	}
	for p, k := range want {
		if kinds[p] != k {
			t.Errorf("%s: %s, want %s", p, kinds[p], k)
		}
	}
}
