package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/frontend/snapshot"
)

// TestKeepBaseNote: --keep-base on a filesystem without reflink says that no base was
// kept and why, instead of being silently ignored; a partial base says how many files
// have none; without --keep-base, or with every file based, nothing is said.
func TestKeepBaseNote(t *testing.T) {
	on := sessionNewOpts{keepBase: true}
	for _, tc := range []struct {
		o    sessionNewOpts
		rep  snapshot.Report
		want string
	}{
		{on, snapshot.Report{Files: 3, Copied: 3}, "no base copies kept: the filesystem cannot reflink"},
		{on, snapshot.Report{Files: 3, Reflinked: 2, Copied: 1, BaseFiles: 2}, "base copies kept for 2 files; 1 files could not be reflinked"},
		{on, snapshot.Report{Files: 3, Reflinked: 3, BaseFiles: 3}, ""},
		{sessionNewOpts{}, snapshot.Report{Files: 3, Copied: 3}, ""},
	} {
		got := baseNote(tc.o, &tc.rep)
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("baseNote(%+v) = %q, want %q", tc.rep, got, tc.want)
		}
	}
	// End to end: on a filesystem that cannot reflink, the note reaches stderr.
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	w := filepath.Join(t.TempDir(), "w")
	if err := os.MkdirAll(w, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(w, "a.txt"), []byte("a\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runSessionCmd(t, "session", "new", "--workspace", w, "--keep-base")
	if err != nil {
		t.Fatalf("session new --keep-base: %v\n%s", err, errOut)
	}
	if !strings.Contains(errOut, "(0 reflinked") {
		t.Skipf("this filesystem reflinks; stdout %q", out)
	}
	if !strings.Contains(errOut, "--keep-base: no base copies kept") {
		t.Errorf("stderr lacks the --keep-base note:\n%s", errOut)
	}
}
