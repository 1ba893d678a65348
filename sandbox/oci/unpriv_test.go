package oci

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// nobody is the uid and gid the unprivileged unpack runs as.
const nobody = 65534

// The unpacker needs no privilege: as uid 65534 it fills a tree whose lower layers made
// read-only and mode-0 directories, and a symlink to a world-writable directory outside
// still cannot be written through. The unpack runs in a re-executed copy of this test
// binary (the go test binary's own directory is private to root).
func TestTreeUnprivileged(t *testing.T) {
	if dir := os.Getenv("BROOD_OCI_UNPRIV_DIR"); dir != "" {
		unprivChild(t, dir)
		return
	}
	testenv.RequireRoot(t)
	s := newSite(t)
	for _, p := range []string{filepath.Dir(s.parent), s.parent, s.sentinel} {
		if err := os.Chmod(p, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	s.before = s.outside(t)
	bin := filepath.Join(s.parent, "test.bin")
	copyFile(t, os.Args[0], bin)
	cmd := exec.Command(bin, "-test.run=^TestTreeUnprivileged$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "BROOD_OCI_UNPRIV_DIR="+s.parent)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	out, err := cmd.CombinedOutput()
	os.Remove(bin)
	if err != nil {
		t.Fatalf("unprivileged unpack: %v\n%s", err, out)
	}
	s.untouched(t)
	if _, err := os.Lstat(filepath.Join(s.tree, "ro/a")); !os.IsNotExist(err) {
		t.Errorf("ro/a survived its whiteout in a read-only directory: %v", err)
	}
	for p, want := range map[string]os.FileMode{"ro": os.ModeDir | 0o555, "ro/b": 0o644, "locked": os.ModeDir} {
		fi, err := os.Lstat(filepath.Join(s.tree, p))
		if err != nil || fi.Mode() != want || fi.Sys().(*syscall.Stat_t).Uid != nobody {
			t.Errorf("%s: %v, %v; want mode %v owned by %d", p, fi.Mode(), err, want, nobody)
		}
	}
}

// unprivChild runs in the child as uid 65534.
func unprivChild(t *testing.T, parent string) {
	if os.Geteuid() != nobody {
		t.Fatalf("child runs as uid %d", os.Geteuid())
	}
	s := &site{parent: parent, tree: filepath.Join(parent, "tree"), sentinel: filepath.Join(parent, "sentinel")}
	ro := dir("ro/")
	ro.mode = 0o555
	locked := dir("locked/")
	locked.mode = 0
	_, err := s.apply(t, TreeOptions{},
		layerTar(t, ro, reg("ro/a", "1"), locked, reg("locked/c", "3")),
		layerTar(t, reg("ro/b", "2"), reg("ro/.wh.a", "")))
	if err != nil {
		t.Fatal(err)
	}
	s2 := &site{parent: parent, tree: filepath.Join(parent, "tree2"), sentinel: s.sentinel}
	_, err = s2.apply(t, TreeOptions{}, layerTar(t, sym("esc", s.sentinel), reg("esc/evil", "x")))
	if !errors.Is(err, ErrSymlinkPath) {
		t.Fatalf("write through a symlink to a world-writable directory: %v", err)
	}
	os.RemoveAll(s2.tree)
}

func copyFile(t *testing.T, from, to string) {
	in, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
