package cli

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"brood.dev/brood/frontend/diff/difftest"
)

// agentGit runs git in dir as the fake agent does inside the VM (the callback runs off
// the test goroutine, so it reports errors instead of failing the test).
func agentGit(dir string, args ...string) error {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Agent", "GIT_AUTHOR_EMAIL=agent@vm",
		"GIT_COMMITTER_NAME=Agent", "GIT_COMMITTER_EMAIL=agent@vm",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, errb.String())
	}
	return nil
}

// gitRun runs `brood run-image test -- true` against the fake helper in a workspace that
// is a git repository with one commit, the fake agent running steps (git argument lists;
// a list starting with "write" writes file args[1] with args[2]) in the snapshot.
func gitRun(t *testing.T, steps ...[]string) (code int, stderr string) {
	t.Helper()
	f := newFakeHelper(t)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	w := filepath.Join(t.TempDir(), "w")
	os.Mkdir(w, 0o755)
	runGit(t, w, "init", "-q", "-b", "master")
	difftest.WriteFiles(w, map[string]string{"a.txt": "a\n"})
	runGit(t, w, "add", "-A")
	runGit(t, w, "commit", "-q", "-m", "init")
	var mu sync.Mutex
	var agentErr error
	f.Agent = func(share, _ string) {
		for _, s := range steps {
			var err error
			if s[0] == "write" {
				err = os.WriteFile(filepath.Join(share, s[1]), []byte(s[2]), 0o644)
			} else {
				err = agentGit(share, s...)
			}
			if err != nil {
				mu.Lock()
				agentErr = err
				mu.Unlock()
				return
			}
		}
	}
	code, _, stderr = runCLI(t, "run-image", "--workspace", w, "test", "--", "true") // run_lifecycle_test.go
	mu.Lock()
	defer mu.Unlock()
	if agentErr != nil {
		t.Fatal(agentErr)
	}
	return code, stderr
}

// TestRunSummaryShowsCommits: the end-of-run summary counts and shows the commits
// section as brood diff does: commits only are not "no changes", a refused ref makes
// exit status 3, and files and commits are both listed.
func TestRunSummaryShowsCommits(t *testing.T) {
	first := []string{"commit", "-q", "--allow-empty", "-m", "agent work"}
	code, stderr := gitRun(t, first, []string{"branch", "feature"}, []string{"tag", "v1"})
	if code != ExitOK || strings.Contains(stderr, "no changes in session") || !strings.Contains(stderr, "commits (brood apply") ||
		!strings.Contains(stderr, "refs/heads/feature") || !strings.Contains(stderr, "refs/tags/v1") ||
		!strings.Contains(stderr, "refs/heads/master") || !strings.Contains(stderr, "review:  brood review") ||
		!strings.Contains(stderr, "diff done (0 change(s), 3 ref(s))") {
		t.Fatalf("commits only: exit %d\n%s", code, stderr)
	}

	code, stderr = gitRun(t, []string{"commit", "-q", "--amend", "--allow-empty", "-m", "rewritten"})
	if code != ExitRefused || strings.Contains(stderr, "no changes in session") || !strings.Contains(stderr, "refused: ") ||
		!strings.Contains(stderr, "1 ref(s) refused") {
		t.Fatalf("rewritten history: exit %d\n%s", code, stderr)
	}

	code, stderr = gitRun(t, []string{"write", "a.txt", "A\n"}, []string{"commit", "-q", "-am", "edit"})
	if code != ExitOK || !strings.Contains(stderr, "modified  a.txt") || !strings.Contains(stderr, "refs/heads/master") ||
		!strings.Contains(stderr, "edit (Agent <agent@vm>; 1 file(s), +1 -1)") {
		t.Fatalf("files and a commit: exit %d\n%s", code, stderr)
	}
}
