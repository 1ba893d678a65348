//go:build linux

package foldfs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/internal/testenv"
)

// mount mounts a folding view of a new backing directory and returns both.
func mount(t *testing.T) (backing, mnt string) {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireFile(t, "/dev/fuse", "test needs FUSE")
	backing, mnt = t.TempDir(), t.TempDir()
	unmount, err := Mount(backing, mnt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unmount(); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	return backing, mnt
}

func ino(t *testing.T, p string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestFoldsCaseAndNormalization(t *testing.T) {
	backing, mnt := mount(t)
	if err := os.WriteFile(filepath.Join(mnt, "readme"), []byte("a"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(mnt, "caf\u00e9", "Sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if a, b := ino(t, filepath.Join(mnt, "readme")), ino(t, filepath.Join(mnt, "README")); a != b {
		t.Errorf("README is inode %d, readme %d: want one file", b, a)
	}
	if err := os.WriteFile(filepath.Join(mnt, "ReadMe"), []byte("b"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(backing, "readme")); err != nil || string(b) != "b" {
		t.Errorf("backing readme = %q, %v: want the write through ReadMe", b, err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "CAFE\u0301", "sub")); err != nil {
		t.Errorf("NFD, upper-case spelling of caf\u00e9/Sub: %v", err)
	}
	names, err := readDirNames(backing)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	if !slices.Equal(names, []string{"caf\u00e9", "readme"}) {
		t.Errorf("backing holds %q, want the first spellings only", names)
	}
	if err := os.Rename(filepath.Join(mnt, "readme"), filepath.Join(mnt, "README")); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(filepath.Join(backing, "README")); err != nil {
		t.Errorf("case-only rename: %v", err)
	}
}
