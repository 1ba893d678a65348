package cli_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// gitIn runs the git binary in dir as root (checks only; brood never runs git), trusting
// the developer-owned repository.
func gitIn(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := exec.Command("git", append([]string{"-c", "safe.directory=*", "-C", dir}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// gitBytes returns W's HEAD, main, index and config as they are now.
func gitBytes(t *testing.T, w string) map[string]string {
	m := map[string]string{}
	for _, f := range []string{".git/HEAD", ".git/refs/heads/main", ".git/index", ".git/config"} {
		m[f] = readFile(t, filepath.Join(w, f))
	}
	return m
}

// TestRunGitCommitEndToEnd: an agent in a real VM changes a file, adds one and commits.
// brood diff lists the two files and the commit on main; apply --all lands the files and
// creates brood/<id>/main; W's HEAD, main, index and config are unchanged, git fsck is
// clean; undo removes the branch.
func TestRunGitCommitEndToEnd(t *testing.T) {
	r := getRig(t)
	w := r.workspace("w-git")
	before := gitBytes(t, w)
	script := `cd /workspace && echo hi >> README.md && echo b > b.txt && git add -A && ` +
		`git -c user.name=agent -c user.email=agent@vm commit -q -m "agent work" && git status --short`
	code, stdout, stderr := r.run(w, "run-image", "test", "--", "sh", "-c", script)
	if code != 0 {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	id := sessionID(t, stderr)
	code, out, errOut := r.run(w, "diff", "--json", id)
	if code != 0 {
		t.Fatalf("diff --json: exit %d %s", code, errOut)
	}
	var d struct {
		Changes []struct{ Path, Kind string }
		Commits []struct {
			Ref     string
			Commits []struct{ Message string }
		}
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range d.Changes {
		got = append(got, c.Kind+" "+c.Path)
	}
	if !reflect.DeepEqual(got, []string{"modified README.md", "added b.txt"}) || len(d.Commits) != 1 ||
		d.Commits[0].Ref != "refs/heads/main" || len(d.Commits[0].Commits) != 1 || d.Commits[0].Commits[0].Message != "agent work\n" {
		t.Fatalf("diff --json:\n%s", out)
	}
	code, out, errOut = r.run(w, "apply", id, "--all", "--yes")
	branch := "brood/" + id + "/main"
	if code != 0 || !strings.Contains(out, "created branch "+branch) {
		t.Fatalf("apply: exit %d\n%s%s", code, out, errOut)
	}
	if after := gitBytes(t, w); !reflect.DeepEqual(after, before) {
		t.Fatalf("W's git files changed:\n%q\n%q", before, after)
	}
	if s := gitIn(t, w, "log", "-1", "--format=%s", branch); s != "agent work" {
		t.Fatalf("git log %s = %q", branch, s)
	}
	gitIn(t, w, "fsck", "--strict")
	code, out, errOut = r.run(w, "undo", id)
	if code != 0 || !strings.Contains(out, "removed branch "+branch) || gitIn(t, w, "branch", "--list", "brood/*") != "" {
		t.Fatalf("undo: exit %d\n%s%s", code, out, errOut)
	}
}

// TestRunDirectEndToEnd: in direct mode the agent's write lands in W during the run, with
// no snapshot and no review.
func TestRunDirectEndToEnd(t *testing.T) {
	r := getRig(t)
	w := r.workspace("w-direct")
	code, stdout, stderr := r.run(w, "run", "--workspace-mode", "direct", "--yes", "shell", "--", "sh", "-c", "echo direct > /workspace/d.txt")
	if code != 0 {
		t.Fatalf("run: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if got := readFile(t, filepath.Join(w, "d.txt")); got != "direct\n" {
		t.Fatalf("W/d.txt = %q", got)
	}
	if !strings.Contains(stderr, "WARNING: DIRECT MODE") || !strings.Contains(stderr, "nothing to review") {
		t.Fatalf("stderr:\n%s", stderr)
	}
	id := sessionID(t, stderr)
	if _, err := os.Stat(filepath.Join(r.state, "sessions", id, "snapshot")); !os.IsNotExist(err) {
		t.Fatalf("a snapshot exists: %v", err)
	}
	code, _, _ = r.run(w, "run", "--workspace-mode", "direct", "shell", "--", "true")
	if code != 2 {
		t.Fatalf("without --yes: exit %d", code)
	}
}
