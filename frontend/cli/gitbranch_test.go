package cli

import (
	"bytes"
	"strings"
	"testing"

	"brood.dev/brood/frontend/diff/difftest"
)

// TestApplyBranchName: apply --all --branch NAME creates the agent's commit as branch
// NAME (journaled: undo removes it); a hostile or existing NAME, or --branch without
// --all, is refused (exit 2) before anything is written.
func TestApplyBranchName(t *testing.T) {
	sess, _ := gitSession(t)
	s := sess.SnapshotDir()
	difftest.WriteFiles(s, map[string]string{"a.txt": "A\n"})
	runGit(t, s, "commit", "-q", "-am", "agent work")
	commit := runGit(t, s, "rev-parse", "HEAD")
	runGit(t, sess.Workspace, "branch", "taken")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--all", "--yes", "--branch", "refs/heads/../../config"}, `".." in the name`},
		{[]string{"--all", "--yes", "--branch", "x\x1b[31m"}, `x\x1b[31m`},
		{[]string{"--all", "--yes", "--branch", "x.lock"}, "ending in .lock"},
		{[]string{"--all", "--yes", "--branch", "taken"}, "ref already exists"},
		{[]string{"--all", "--yes", "--branch", "taken/sub"}, "refs/heads/taken is in its way"},
		{[]string{"--all", "--yes", "--branch", "master"}, "ref already exists"},
		{[]string{"a.txt", "--yes", "--branch", "mine"}, "--branch needs --all"},
	} {
		out, code := applyCLI(t, nil, append([]string{"apply", sess.ID}, c.args...)...)
		if code != ExitUsage || !strings.Contains(out, c.want) || strings.Contains(out, "\x1b") {
			t.Errorf("%q: exit %d\n%s", c.args, code, out)
		}
	}
	if wFile(t, sess, "a.txt") != "a\n" {
		t.Fatal("a refused --branch applied the files")
	}
	out, code := applyCLI(t, nil, "apply", sess.ID, "--all", "--yes", "--branch", "agent/work")
	if code != ExitOK || !strings.Contains(out, "created branch agent/work at "+commit[:12]) || wFile(t, sess, "a.txt") != "A\n" {
		t.Fatalf("apply --branch (%d):\n%s", code, out)
	}
	if got := runGit(t, sess.Workspace, "rev-parse", "agent/work"); got != commit {
		t.Fatalf("agent/work = %q, want %s", got, commit)
	}
	if got := runGit(t, sess.Workspace, "branch", "--list", "brood/*"); got != "" {
		t.Fatalf("brood branches: %q", got)
	}
	runGit(t, sess.Workspace, "fsck", "--strict")
	out, code = applyCLI(t, nil, "undo", sess.ID)
	if code != ExitOK || !strings.Contains(out, "removed branch agent/work") {
		t.Fatalf("undo (%d):\n%s", code, out)
	}
	if got := runGit(t, sess.Workspace, "branch", "--list", "agent/*"); got != "" {
		t.Fatalf("branches after undo: %q", got)
	}
}

// TestReviewBranchPrefix: with several changed refs review --all --branch NAME creates
// NAME/<ref> for each (NAME/master, NAME/tags/v1); --branch with --reject-all is
// refused.
func TestReviewBranchPrefix(t *testing.T) {
	sess, _ := gitSession(t)
	s := sess.SnapshotDir()
	difftest.WriteFiles(s, map[string]string{"a.txt": "A\n"})
	runGit(t, s, "commit", "-q", "-am", "agent work")
	runGit(t, s, "tag", "v1")
	commit := runGit(t, s, "rev-parse", "HEAD")
	out, code := applyCLI(t, nil, "review", sess.ID, "--reject-all", "--branch", "rev")
	if code != ExitUsage || !strings.Contains(out, "--branch needs --all") {
		t.Fatalf("review --reject-all --branch (%d):\n%s", code, out)
	}
	out, code = applyCLI(t, nil, "review", sess.ID, "--all", "--branch", "rev")
	if code != ExitOK || !strings.Contains(out, "created branch rev/master") || !strings.Contains(out, "created branch rev/tags/v1") {
		t.Fatalf("review --all --branch (%d):\n%s", code, out)
	}
	for _, b := range []string{"rev/master", "rev/tags/v1"} {
		if got := runGit(t, sess.Workspace, "rev-parse", b); got != commit {
			t.Errorf("%s = %q, want %s", b, got, commit)
		}
	}
	out, code = applyCLI(t, nil, "undo", sess.ID)
	if code != ExitOK || runGit(t, sess.Workspace, "branch", "--list", "rev/*") != "" {
		t.Fatalf("undo (%d):\n%s", code, out)
	}
}

// TestAskRefShowsCommitDiffs: in the per-ref question of an interactive review, d shows
// each commit with its own diff (escaped: an escape sequence in a file's content never
// reaches the terminal raw), "d ID" one commit, an unknown ID says so; y then creates the
// branch, and a ref answered with anything else is skipped.
func TestAskRefShowsCommitDiffs(t *testing.T) {
	sess, _ := gitSession(t)
	s := sess.SnapshotDir()
	difftest.WriteFiles(s, map[string]string{"a.txt": "A\n"})
	runGit(t, s, "commit", "-q", "-am", "first")
	first := runGit(t, s, "rev-parse", "HEAD")
	difftest.WriteFiles(s, map[string]string{"b.txt": "evil \x1b[31mred\n"})
	runGit(t, s, "add", "-A")
	runGit(t, s, "commit", "-q", "-m", "second")
	second := runGit(t, s, "rev-parse", "HEAD")
	var out bytes.Buffer
	in := strings.NewReader("d\nd " + first[:8] + "\nd 0g\ny\n")
	if err := applyCommitsAfter(in, &out, sess.ID, "", true, true, nil); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	got := out.String()
	parts := strings.Split(got, "create branch brood/"+sess.ID+"/master with 2 commit(s)?")
	if len(parts) != 5 {
		t.Fatalf("asked %d times:\n%s", len(parts)-1, got)
	}
	if !strings.Contains(parts[1], "commit "+second) || !strings.Contains(parts[1], "commit "+first) ||
		!strings.Contains(parts[1], "+evil \\x1b[31mred") || !strings.Contains(parts[1], "-a\n+A\n") {
		t.Errorf("d:\n%s", parts[1])
	}
	if strings.Contains(parts[2], "commit "+second) || !strings.Contains(parts[2], "commit "+first) {
		t.Errorf("d %s:\n%s", first[:8], parts[2])
	}
	if !strings.Contains(parts[3], "no commit of refs/heads/master starts with 0g") {
		t.Errorf("d 0g:\n%s", parts[3])
	}
	if strings.Contains(got, "\x1b") || !strings.Contains(parts[4], "created branch brood/"+sess.ID+"/master") {
		t.Errorf("y:\n%s", parts[4])
	}
	if runGit(t, sess.Workspace, "rev-parse", "brood/"+sess.ID+"/master") != second {
		t.Error("branch not created")
	}
}
