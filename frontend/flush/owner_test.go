package flush

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/internal/testenv"
)

// testGroup is the supplementary group TestModifiedKeepsGroup gives its child.
const testGroup = 4242

// TestModifiedKeepsGroup: an applied modified file keeps its group when the user is a
// member of it but runs with another primary group (as under sg); a new file gets the
// group a new file gets (the process's, as with cp). As root the test re-runs itself as
// uid/gid 65534 with supplementary group 4242.
func TestModifiedKeepsGroup(t *testing.T) {
	if os.Geteuid() == 0 {
		runAsNobody(t, "TestModifiedKeepsGroup", testGroup)
		return
	}
	gid := -1
	groups, _ := os.Getgroups()
	for _, g := range groups {
		if g != os.Getegid() {
			gid = g
		}
	}
	if gid < 0 {
		testenv.Skip(t, "needs root or a supplementary group")
	}
	f := newFixture(t, map[string]string{"mod.txt": "old\n"})
	if err := os.Chown(filepath.Join(f.W, "mod.txt"), -1, gid); err != nil {
		t.Fatal(err)
	}
	f = snapshotOf(t, f.W)
	put(t, f.S, "mod.txt", "new\n", 0o644)
	put(t, f.S, "new.txt", "n\n", 0o644)
	if _, err := Apply(ctx, f.sess, f.m, items(f.change(diff.KindModified, "mod.txt"), f.change(diff.KindAdded, "new.txt")), Options{}); err != nil {
		t.Fatal(err)
	}
	if got := groupOf(t, filepath.Join(f.W, "mod.txt")); got != gid {
		t.Errorf("mod.txt group %d, want %d (kept)", got, gid)
	}
	if got := groupOf(t, filepath.Join(f.W, "new.txt")); got != os.Getegid() {
		t.Errorf("new.txt group %d, want %d (the process's, as cp)", got, os.Getegid())
	}
	if read(t, f.W, "mod.txt") != "new\n" {
		t.Error("mod.txt not applied")
	}
}

func groupOf(t *testing.T, p string) int {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Gid)
}

// runAsNobody re-runs test name in a copy of the test binary as uid/gid 65534 with the
// given supplementary groups, and fails when it fails.
func runAsNobody(t *testing.T, name string, groups ...uint32) {
	t.Helper()
	dir, err := os.MkdirTemp("", "brood-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "test.bin")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "TMPDIR=/tmp")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: groups}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s as nobody: %v\n%s", name, err, out)
	}
	t.Logf("%s as nobody:\n%s", name, out)
}
