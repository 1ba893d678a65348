package snapshot

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/internal/testenv"
)

// TestRealGitRepository snapshots a repository made by git itself, with a token in the
// remote URL, a credential helper and an fsmonitor hook, and checks that git works in S,
// sees a clean tree, and gets the remote without the token.
func TestRealGitRepository(t *testing.T) {
	gitBin := testenv.RequireCommand(t, "git")
	home := t.TempDir()
	git := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(gitBin, append([]string{"-C", dir}, args...)...)
		cmd.Env = append(os.Environ(), "HOME="+home, "GIT_CONFIG_NOSYSTEM=1",
			"GIT_AUTHOR_NAME=a", "GIT_AUTHOR_EMAIL=a@x", "GIT_COMMITTER_NAME=a", "GIT_COMMITTER_EMAIL=a@x")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	w := t.TempDir()
	git(w, "init", "-q", "-b", "main")
	write(t, filepath.Join(w, "main.go"), "package main\n", 0o644)
	git(w, "add", "main.go")
	git(w, "commit", "-q", "-m", "first")
	git(w, "remote", "add", "origin", "https://dev:"+canary+"@github.com/o/r.git")
	git(w, "config", "credential.helper", "store --file /tmp/"+canary)
	git(w, "config", "core.fsmonitor", "/tmp/"+canary+"-hook")
	git(w, "config", "http.https://github.com/.extraHeader", "Authorization: Bearer "+canary)

	s, m, rep := take(t, w, Options{})
	grepTree(t, s, canary)
	if got := git(s, "remote", "get-url", "origin"); got != "https://github.com/o/r.git" {
		t.Errorf("remote in S: %q", got)
	}
	if got := git(s, "status", "--porcelain"); got != "" {
		t.Errorf("git status in S: %q", got)
	}
	if got := git(s, "log", "--format=%s"); got != "first" {
		t.Errorf("git log in S: %q", got)
	}
	if len(rep.Sanitized) != 1 || len(rep.Sanitized[0].Removed) != 4 {
		t.Errorf("sanitized: %+v", rep.Sanitized)
	}
	if e := m.Lookup(".git/config"); e == nil || !e.Sanitized {
		t.Errorf(".git/config entry: %+v", e)
	}
}
