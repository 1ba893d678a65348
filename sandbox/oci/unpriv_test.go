package oci

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
	b, err := os.ReadFile(filepath.Join(s.parent, "owners.json"))
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(s.parent, "owners.json"))
	s.untouched(t)
	if _, err := os.Lstat(filepath.Join(s.tree, "ro/a")); !os.IsNotExist(err) {
		t.Errorf("ro/a survived its whiteout in a read-only directory: %v", err)
	}
	for p, want := range map[string]os.FileMode{"ro": os.ModeDir | 0o555, "ro/b": 0o644, "locked": os.ModeDir, "l": os.ModeSymlink | 0o777} {
		fi, err := os.Lstat(filepath.Join(s.tree, p))
		if err != nil || fi.Mode() != want || fi.Sys().(*syscall.Stat_t).Uid != nobody {
			t.Errorf("%s: %v, %v; want mode %v owned by %d", p, fi.Mode(), err, want, nobody)
		}
	}
	// Root applies the owner table the unprivileged unpack recorded, and nothing else.
	var table map[string]Owner
	if err := json.Unmarshal(b, &table); err != nil {
		t.Fatal(err)
	}
	if err := ApplyOwners(s.tree, table); err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]uint32{"ro": 0, "ro/b": 1001, "locked": 123456, "locked/c": 1000, "l": 42, "h": 1000, "implied": 0} {
		fi, err := os.Lstat(filepath.Join(s.tree, p))
		if err != nil || fi.Sys().(*syscall.Stat_t).Uid != want || fi.Sys().(*syscall.Stat_t).Gid != want {
			t.Errorf("%s: owner %+v, %v; want %d:%d", p, fi.Sys(), err, want, want)
		}
	}
	s.untouched(t)
}

// The owner table is untrusted: entries outside the tree are refused, entries below a
// symlink passed over, and nothing outside the tree changes owner.
func TestApplyOwnersHostile(t *testing.T) {
	testenv.RequireRoot(t)
	for _, bad := range []string{"../sentinel/keep", "/SENT/keep", "", "a/../../sentinel"} {
		s := newSite(t)
		if _, err := s.apply(t, TreeOptions{}, layerTar(t, reg("f", "x"))); err != nil {
			t.Fatal(err)
		}
		bad = strings.Replace(bad, "/SENT", s.sentinel, 1)
		err := ApplyOwners(s.tree, map[string]Owner{"f": {1, 1}, bad: {4242, 4242}})
		if !errors.Is(err, ErrUnsafePath) || !strings.Contains(err.Error(), fmt.Sprintf("%q", bad)) {
			t.Errorf("ApplyOwners(%q) = %v; want ErrUnsafePath naming it", bad, err)
		}
		s.untouched(t)
	}
	s := newSite(t)
	if _, err := s.apply(t, TreeOptions{}, layerTar(t, sym("esc", s.sentinel))); err != nil {
		t.Fatal(err)
	}
	if err := ApplyOwners(s.tree, map[string]Owner{"esc/keep": {4242, 4242}, "esc": {7, 7}}); err != nil {
		t.Errorf("ApplyOwners through a symlink: %v; want it passed over", err)
	}
	if fi, err := os.Lstat(filepath.Join(s.tree, "esc")); err != nil || fi.Sys().(*syscall.Stat_t).Uid != 7 {
		t.Errorf("esc: %v, %v; want the link itself owned by 7", fi, err)
	}
	s.untouched(t)
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
	locked.mode, locked.uid = 0, 123456
	c, b, l := reg("locked/c", "3"), reg("ro/b", "2"), sym("l", "ro/b")
	c.uid, b.uid, l.uid = 1000, 1001, 42
	tr, err := NewTree(s.tree, TreeOptions{RecordOwners: true})
	if err != nil {
		t.Fatal(err)
	}
	for i, layer := range [][]byte{
		layerTar(t, ro, reg("ro/a", "1"), locked, c, reg("implied/x", "")),
		layerTar(t, b, reg("ro/.wh.a", ""), l, hard("h", "locked/c")),
	} {
		if err := tr.Apply(fmt.Sprint(i), bytes.NewReader(layer)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := tr.Finish(); err != nil {
		t.Fatal(err)
	}
	js, _ := json.Marshal(tr.Owners())
	if err := os.WriteFile(filepath.Join(parent, "owners.json"), js, 0o644); err != nil {
		t.Fatal(err)
	}
	tr.Close()
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
