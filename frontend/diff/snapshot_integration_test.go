package diff_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/snapshot"
)

// TestWithRealSnapshot runs the diff on a snapshot taken by package snapshot: a fresh
// snapshot (with an excluded secret, a skipped FIFO and a sanitized .git/config) is no
// change at all and no file is read; then an agent edit is exactly one change.
func TestWithRealSnapshot(t *testing.T) {
	dir := t.TempDir()
	w, s := filepath.Join(dir, "w"), filepath.Join(dir, "s")
	if err := os.Mkdir(w, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := difftest.WriteFiles(w, map[string]string{
		"main.go": "package main\n", "sub/lib.go": "package sub\n", ".env": "TOKEN=x\n",
		"key.pem": "-----BEGIN-----\n", "crlf.txt": "a\r\nb\r\n",
		".git/HEAD":   "ref: refs/heads/main\n",
		".git/config": "[remote \"origin\"]\n\turl = https://user:secret@example.com/r.git\n[core]\n\tfsmonitor = evil\n",
	}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(w, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("main.go", filepath.Join(w, "link")); err != nil {
		t.Fatal(err)
	}
	m, _, err := snapshot.Take(context.Background(), w, s, snapshot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var reads []string
	var mu sync.Mutex
	opts := diff.Options{OnOpen: func(tr diff.Tree, p string) error {
		mu.Lock()
		defer mu.Unlock()
		reads = append(reads, tr.String()+":"+p)
		return nil
	}}
	got, err := diff.Compute(context.Background(), w, s, m, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 || len(reads) != 0 {
		t.Fatalf("fresh snapshot: changes %+v, reads %q; want none", got, reads)
	}
	if err := os.WriteFile(filepath.Join(s, "main.go"), []byte("package main\n\nfunc main() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = diff.Compute(context.Background(), w, s, m, opts)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Path != "main.go" || got[0].Kind != diff.KindModified || got[0].OldHash == nil {
		t.Fatalf("after one edit: %+v, want main.go modified", got)
	}
}
