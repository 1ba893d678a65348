package diff_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/snapshot"
)

// asNobody re-runs the test named name in a child of the test binary as uid/gid 65534
// when the test runs as root (root reads chmod 000 files anyway), and reports whether the
// caller is that parent (and must return). Without root it returns false and the test
// runs in process.
func asNobody(t *testing.T, name string) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		return false
	}
	// The test binary lives in a 0700 build directory: run a copy nobody can execute.
	bdir, err := os.MkdirTemp("", "brood-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(bdir) })
	bin := filepath.Join(bdir, "test.bin")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), "TMPDIR=/tmp")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s as nobody: %v\n%s", name, err, out)
	}
	t.Logf("%s as nobody:\n%s", name, out)
	return true
}

// TestUnreadableSkipped: an unreadable file and directory in W (chmod 000, and a
// directory that can be listed but not searched) do not fail the snapshot; they are
// recorded as skipped, reported, never proposed for deletion, and S writing there is
// refused.
func TestUnreadableSkipped(t *testing.T) {
	if asNobody(t, "TestUnreadableSkipped") {
		return
	}
	dir := t.TempDir()
	w, s := filepath.Join(dir, "w"), filepath.Join(dir, "s")
	if err := os.Mkdir(w, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := difftest.WriteFiles(w, map[string]string{"a.txt": "a", "locked.txt": "secret", "lockdir/x": "x", "noexec/y": "y"}); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{"locked.txt": 0, "lockdir": 0, "noexec": 0o600} {
		if err := os.Chmod(filepath.Join(w, p), mode); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(w, "lockdir"), 0o755); os.Chmod(filepath.Join(w, "noexec"), 0o755) })
	m, rep, err := snapshot.Take(context.Background(), w, s, snapshot.Options{})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	skipped := map[string]string{}
	for _, it := range rep.Skipped {
		skipped[it.Path] = it.Why
	}
	for _, p := range []string{"locked.txt", "lockdir", "noexec"} {
		if skipped[p] != snapshot.SkipUnreadable {
			t.Errorf("report: %s skipped %q, want %q (report %+v)", p, skipped[p], snapshot.SkipUnreadable, rep.Skipped)
		}
		if e := m.Lookup(p); e == nil || e.Skipped != snapshot.SkipUnreadable || e.S.Type != manifest.TypeNone {
			t.Errorf("manifest: %s = %+v, want skipped and not copied", p, e)
		}
	}
	got, err := diff.Compute(context.Background(), w, s, m, diff.Options{})
	if err != nil {
		t.Fatalf("diff: %v", err)
	}
	if len(got) != 0 {
		t.Fatalf("fresh snapshot: %+v, want no change (no deletion of unreadable entries)", got)
	}
	if err := difftest.WriteFiles(s, map[string]string{"locked.txt": "agent", "lockdir/x": "agent", "noexec/z": "agent"}); err != nil {
		t.Fatal(err)
	}
	got, err = diff.Compute(context.Background(), w, s, m, diff.Options{})
	if err != nil {
		t.Fatalf("diff: %v", err)
	}
	if len(got) != 5 {
		t.Errorf("changes %+v, want 5 refused", got)
	}
	for _, c := range got {
		if c.Kind != diff.KindRefused {
			t.Errorf("%s: %s %q, want refused", c.Path, c.Kind, c.Reason)
		}
	}
}
