package diff

import (
	"context"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff/difftest/foldfs"
	"brood.dev/brood/internal/testenv"
)

// foldingW mounts a case-folding FUSE view of a new directory and returns the mount.
func foldingW(t *testing.T) string {
	t.Helper()
	testenv.RequireRoot(t)
	testenv.RequireFile(t, "/dev/fuse", "test needs FUSE")
	w := t.TempDir()
	unmount, err := foldfs.Mount(t.TempDir(), w)
	must(t, err)
	t.Cleanup(func() {
		if err := unmount(); err != nil {
			t.Errorf("unmount %s: %v", w, err)
		}
	})
	return w
}

func foldsCaseAt(t *testing.T, dir string) bool {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	f, err := foldsCase(fd)
	must(t, err)
	return f
}

// TestProbeFold: a FUSE volume reports no magic, so case folding is found by probing;
// a case-sensitive directory probes as such, also when it holds both spellings.
func TestProbeFold(t *testing.T) {
	plain := t.TempDir()
	writeFiles(t, plain, map[string]string{"README": "x"})
	if foldsCaseAt(t, plain) {
		t.Errorf("%s (case-sensitive) probes as folding", plain)
	}
	writeFiles(t, plain, map[string]string{"readme": "y", "Makefile": "z"})
	if foldsCaseAt(t, plain) {
		t.Errorf("%s with README and readme probes as folding", plain)
	}
	w := foldingW(t)
	if foldsCaseAt(t, w) {
		t.Errorf("an empty folding volume cannot be probed, yet probes as folding")
	}
	writeFiles(t, w, map[string]string{"src/main.go": "x"})
	if !foldsCaseAt(t, w) {
		t.Errorf("folding volume %s probes as case-sensitive", w)
	}
}

// TestRiskRulesOnFoldingVolume: on a W that folds case, S's upper-case spelling of every
// riskRules row, at the root and at depth, is a change with the row's reason.
func TestRiskRulesOnFoldingVolume(t *testing.T) {
	w := foldingW(t)
	writeFiles(t, w, map[string]string{".git/HEAD": "ref: refs/heads/main\n", ".git/config": "[core]\n", "src/main.go": "x"})
	s := t.TempDir()
	m := testSnapshot(t, w, s, true)
	want := map[string]string{}
	files := map[string]string{}
	for _, r := range riskRules {
		ex := upperASCII(riskExample(r.match))
		for _, p := range []string{ex, "DEEP/" + ex} {
			want[p], files[p] = r.why, "x\n"
		}
	}
	writeFiles(t, s, files)
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	gm := byPath(got)
	for p, why := range want {
		if c := gm[p]; !strings.HasPrefix(c.Risk, why) {
			t.Errorf("%s: %s risk %q, want %q", p, c.Kind, c.Risk, why)
		}
	}
	if _, err := os.Stat(w + "/.GIT/CONFIG"); err != nil {
		t.Errorf("W does not fold case: %v", err)
	}
}

// TestNormalizationCollision: on a folding W, an NFD spelling of an NFC name W holds (one
// file on APFS) is refused as a collision, like a case variant.
func TestNormalizationCollision(t *testing.T) {
	w := foldingW(t)
	writeFiles(t, w, map[string]string{"caf\u00e9.txt": "nfc\n", "Notes.md": "n\n"})
	s := t.TempDir()
	m := testSnapshot(t, w, s, true)
	writeFiles(t, s, map[string]string{"cafe\u0301.txt": "nfd\n", "NOTES.MD": "N\n", "other.txt": "o\n"})
	got, err := Compute(context.Background(), w, s, m, Options{})
	must(t, err)
	gm := byPath(got)
	for _, p := range []string{"cafe\u0301.txt", "NOTES.MD"} {
		if c := gm[p]; c.Kind != KindRefused || !strings.Contains(c.Reason, "case collision") {
			t.Errorf("%q: %s %q, want refused as a collision", p, c.Kind, c.Reason)
		}
	}
	if c := gm["other.txt"]; c.Kind != KindAdded {
		t.Errorf("other.txt: %s %q, want added", c.Kind, c.Reason)
	}
}
