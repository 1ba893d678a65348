package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/flush"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/internal/testenv"
)

// runGit runs the git binary in dir (fixtures and checks only; brood never runs git)
// with a fixed identity and no user or system config, and returns its trimmed stdout.
func runGit(t *testing.T, dir string, args ...string) string {
	t.Helper()
	testenv.RequireCommand(t, "git")
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Agent", "GIT_AUTHOR_EMAIL=agent@vm",
		"GIT_COMMITTER_NAME=Agent", "GIT_COMMITTER_EMAIL=agent@vm",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, errb.String())
	}
	return strings.TrimSpace(out.String())
}

// gitSession makes a stopped session of a workspace that is a git repository with one
// commit (a.txt) and returns it with the bytes of W's HEAD, master, index and config
// taken just before the snapshot.
func gitSession(t *testing.T) (*session.Session, map[string]string) {
	t.Helper()
	w := newWorkspace(t)
	runGit(t, w, "init", "-q", "-b", "master")
	difftest.WriteFiles(w, map[string]string{"a.txt": "a\n"})
	runGit(t, w, "add", "-A")
	runGit(t, w, "commit", "-q", "-m", "init")
	runGit(t, w, "status", "--porcelain")
	before := gitFiles(t, w)
	sess := snapshotSession(t, w)
	if err := sess.SetState(session.StateStopped); err != nil {
		t.Fatal(err)
	}
	return sess, before
}

// gitFiles returns the bytes of the files of W's repository an apply must not change.
func gitFiles(t *testing.T, w string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, f := range []string{".git/HEAD", ".git/refs/heads/master", ".git/index", ".git/config"} {
		b, err := os.ReadFile(filepath.Join(w, f))
		if err != nil {
			t.Fatal(err)
		}
		m[f] = string(b)
	}
	return m
}

// TestGitAcceptance is the scenario of docs/git-review.md: the agent changes a.txt,
// adds b.txt and commits. brood diff lists 2 changes and 1 commit; apply --all writes
// the files and creates brood/<id>/master; W's HEAD, master, index and config are
// unchanged; fsck is clean; undo removes the branch.
func TestGitAcceptance(t *testing.T) {
	sess, before := gitSession(t)
	s := sess.SnapshotDir()
	difftest.WriteFiles(s, map[string]string{"a.txt": "A\n", "b.txt": "b\n"})
	runGit(t, s, "add", "-A")
	runGit(t, s, "commit", "-q", "-m", "agent work")
	commit := runGit(t, s, "rev-parse", "HEAD")

	out, msg, code := runBrood(t, "diff", sess.ID)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != ExitOK || len(lines) < 4 || lines[0] != "modified  a.txt" || lines[1] != "added     b.txt" ||
		!strings.HasPrefix(lines[2], "commits ") || !strings.Contains(lines[3], "refs/heads/master") ||
		!strings.Contains(lines[3], ": 1 commit(s)") || !strings.Contains(out, commit[:12]+" agent work (Agent <agent@vm>; 2 file(s), +2 -1)") {
		t.Fatalf("diff (%d %s):\n%s", code, msg, out)
	}
	jsonOut, _, _ := runBrood(t, "diff", sess.ID, "--json")
	var v struct {
		Changes []struct{ Path string }
		Commits []struct {
			Ref, Old, New string
			Commits       []struct {
				ID, Author, Message          string
				Parents                      []string
				Files, Insertions, Deletions int
			}
		}
	}
	if err := json.Unmarshal([]byte(jsonOut), &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Changes) != 2 || len(v.Commits) != 1 || v.Commits[0].Ref != "refs/heads/master" || v.Commits[0].New != commit ||
		len(v.Commits[0].Commits) != 1 || v.Commits[0].Commits[0].Files != 2 || v.Commits[0].Commits[0].Message != "agent work\n" ||
		!reflect.DeepEqual(v.Commits[0].Commits[0].Parents, []string{v.Commits[0].Old}) {
		t.Fatalf("json:\n%s", jsonOut)
	}

	out, code = applyCLI(t, nil, "apply", sess.ID, "--all", "--yes")
	branch := "brood/" + sess.ID + "/master"
	if code != ExitOK || !strings.Contains(out, "created branch "+branch) {
		t.Fatalf("apply (%d):\n%s", code, out)
	}
	if wFile(t, sess, "a.txt") != "A\n" || wFile(t, sess, "b.txt") != "b\n" {
		t.Fatal("files not applied")
	}
	if after := gitFiles(t, sess.Workspace); !reflect.DeepEqual(after, before) {
		t.Fatalf("W's git files changed:\n%q\n%q", before, after)
	}
	if got := runGit(t, sess.Workspace, "log", "--format=%H", branch); !strings.HasPrefix(got, commit+"\n") {
		t.Fatalf("git log %s = %q", branch, got)
	}
	runGit(t, sess.Workspace, "fsck", "--strict")

	out, code = applyCLI(t, nil, "undo", sess.ID)
	if code != ExitOK || !strings.Contains(out, "removed branch "+branch) {
		t.Fatalf("undo (%d):\n%s", code, out)
	}
	if got := runGit(t, sess.Workspace, "branch", "--list", "brood/*"); got != "" {
		t.Fatalf("branches after undo: %q", got)
	}
	if wFile(t, sess, "b.txt") != "<absent>" {
		t.Fatal("b.txt not reverted")
	}
}

// TestGitStatusOnlyIsNoChange: an agent that only ran git status leaves an empty diff.
func TestGitStatusOnlyIsNoChange(t *testing.T) {
	sess, _ := gitSession(t)
	os.Chtimes(filepath.Join(sess.SnapshotDir(), "a.txt"), yesterday(), yesterday()) // forces an index refresh
	runGit(t, sess.SnapshotDir(), "status")
	out, msg, code := runBrood(t, "diff", sess.ID)
	if code != ExitOK || out != "no changes\n" {
		t.Fatalf("diff (%d %s):\n%q", code, msg, out)
	}
}

func TestDiffPatch(t *testing.T) {
	sess, _ := gitSession(t)
	s := sess.SnapshotDir()
	difftest.WriteFiles(s, map[string]string{"a.txt": "A\x1b[31m\n", "b.txt": "b\n"})
	runGit(t, s, "add", "-A")
	runGit(t, s, "commit", "-q", "-m", "agent \x1b]0;evil\x07work")
	out, msg, code := runBrood(t, "diff", sess.ID, "-p")
	if code != ExitOK || !strings.Contains(out, "diff --git a/a.txt b/a.txt\n") || !strings.Contains(out, "-a\n+A\\x1b[31m\n") ||
		!strings.Contains(out, "--- /dev/null\n+++ b/b.txt\n") || strings.Contains(out, "commit ") || strings.Contains(out, "\x1b") {
		t.Fatalf("diff -p (%d %s):\n%s", code, msg, out)
	}
	out, _, code = runBrood(t, "diff", sess.ID, "-p", "--commits")
	if code != ExitOK || !strings.Contains(out, "    agent \\x1b]0;evil\\awork\n") || !strings.Contains(out, "+b\n") || strings.Contains(out, "\x1b") {
		t.Fatalf("diff -p --commits (%d):\n%s", code, out)
	}
	if _, _, code := runBrood(t, "diff", sess.ID, "--commits"); code != ExitUsage {
		t.Fatalf("--commits alone: exit %d", code)
	}
	if _, _, code := runBrood(t, "diff", sess.ID, "-p", "--json"); code != ExitUsage {
		t.Fatalf("-p --json: exit %d", code)
	}
}

// yesterday is a time a day in the past, to make a file's stat differ from the index.
func yesterday() time.Time { return time.Now().Add(-24 * time.Hour) }

// TestApplyPathLeavesCommits: apply PATH applies only that file and says the commits
// were not applied; no branch is created.
func TestApplyPathLeavesCommits(t *testing.T) {
	sess, _ := gitSession(t)
	s := sess.SnapshotDir()
	difftest.WriteFiles(s, map[string]string{"a.txt": "A\n"})
	runGit(t, s, "commit", "-q", "-am", "agent work")
	out, code := applyCLI(t, nil, "apply", sess.ID, "a.txt", "--yes")
	if code != ExitOK || !strings.Contains(out, "commits not applied") || wFile(t, sess, "a.txt") != "A\n" {
		t.Fatalf("apply a.txt (%d):\n%s", code, out)
	}
	if got := runGit(t, sess.Workspace, "branch", "--list", "brood/*"); got != "" {
		t.Fatalf("branches: %q", got)
	}
}

// TestFastForwardCommand: brood ff refuses the checked-out branch and a branch not
// applied yet, fast-forwards another one, and brood undo moves it back.
func TestFastForwardCommand(t *testing.T) {
	sess, before := gitSession(t)
	runGit(t, sess.Workspace, "branch", "feature")
	s := sess.SnapshotDir()
	runGit(t, s, "branch", "feature")
	runGit(t, s, "checkout", "-q", "feature")
	difftest.WriteFiles(s, map[string]string{"c.txt": "c\n"})
	runGit(t, s, "add", "-A")
	runGit(t, s, "commit", "-q", "-m", "on feature")
	commit := runGit(t, s, "rev-parse", "HEAD")
	old := runGit(t, sess.Workspace, "rev-parse", "feature")
	if _, code := applyCLI(t, nil, "ff", sess.ID, "feature"); code != ExitUsage {
		t.Fatalf("ff before apply: exit %d", code)
	}
	if out, code := applyCLI(t, nil, "apply", sess.ID, "--all", "--yes"); code != ExitOK {
		t.Fatalf("apply (%d):\n%s", code, out)
	}
	if out, code := applyCLI(t, nil, "ff", sess.ID, "feature"); code != ExitOK || runGit(t, sess.Workspace, "rev-parse", "feature") != commit {
		t.Fatalf("ff feature (%d):\n%s", code, out)
	}
	if after := gitFiles(t, sess.Workspace); !reflect.DeepEqual(after, before) {
		t.Fatal("HEAD, master, index or config changed")
	}
	runGit(t, sess.Workspace, "fsck", "--strict")
	out, code := applyCLI(t, nil, "undo", sess.ID)
	if code != ExitOK || !strings.Contains(out, "moved branch feature back to "+old[:12]) ||
		runGit(t, sess.Workspace, "rev-parse", "feature") != old || runGit(t, sess.Workspace, "branch", "--list", "brood/*") != "" {
		t.Fatalf("undo (%d):\n%s", code, out)
	}
}

// TestFastForwardCheckedOut: the checked-out branch is never moved.
func TestFastForwardCheckedOut(t *testing.T) {
	sess, before := gitSession(t)
	s := sess.SnapshotDir()
	difftest.WriteFiles(s, map[string]string{"c.txt": "c\n"})
	runGit(t, s, "add", "-A")
	runGit(t, s, "commit", "-q", "-m", "on master")
	applyCLI(t, nil, "apply", sess.ID, "--all", "--yes")
	out, code := applyCLI(t, nil, "ff", sess.ID, "master")
	if code != ExitRefused || !strings.Contains(out, "checked out") {
		t.Fatalf("ff master (%d):\n%s", code, out)
	}
	if after := gitFiles(t, sess.Workspace); after[".git/refs/heads/master"] != before[".git/refs/heads/master"] {
		t.Fatal("master moved")
	}
	recs, _ := flush.JournaledRefs(sess)
	if len(recs) != 2 || !recs[1].Undone {
		t.Fatalf("journal %+v", recs)
	}
}

// TestReviewCommits: review --all creates the branches as apply --all does; --reject-all
// only shows the commits.
func TestReviewCommits(t *testing.T) {
	sess, _ := gitSession(t)
	s := sess.SnapshotDir()
	difftest.WriteFiles(s, map[string]string{"a.txt": "A\n"})
	runGit(t, s, "commit", "-q", "-am", "agent work")
	out, code := applyCLI(t, nil, "review", sess.ID, "--reject-all")
	if code != ExitOK || !strings.Contains(out, "agent work") || runGit(t, sess.Workspace, "branch", "--list", "brood/*") != "" {
		t.Fatalf("review --reject-all (%d):\n%s", code, out)
	}
	out, code = applyCLI(t, nil, "review", sess.ID, "--all")
	if code != ExitOK || !strings.Contains(out, "created branch brood/"+sess.ID+"/master") {
		t.Fatalf("review --all (%d):\n%s", code, out)
	}
	runGit(t, sess.Workspace, "fsck", "--strict")
}

// TestNestedRepositoryNote: a nested repository's git files stay listed as changes and
// the commits section says its commits are not reviewed.
func TestNestedRepositoryNote(t *testing.T) {
	sess, _ := gitSession(t)
	s := sess.SnapshotDir()
	os.MkdirAll(filepath.Join(s, "sub"), 0o755)
	runGit(t, filepath.Join(s, "sub"), "init", "-q")
	out, _, _ := runBrood(t, "diff", sess.ID)
	if !strings.Contains(out, "note: nested repository sub: its commits are not reviewed") || !strings.Contains(out, "sub/.git/HEAD") {
		t.Fatalf("diff:\n%s", out)
	}
}

// TestDiffCommitsOnly: a diff with commits and no file change does not say "no changes"
// above its commits section; notes alone follow "no changes" with no commits header.
func TestDiffCommitsOnly(t *testing.T) {
	sess, _ := gitSession(t)
	s := sess.SnapshotDir()
	runGit(t, s, "update-ref", "refs/remotes/origin/x", "HEAD")
	out, msg, code := runBrood(t, "diff", sess.ID)
	if code != ExitOK || strings.Contains(out, "commits (") ||
		!strings.HasPrefix(out, "no changes\nnote: ") || !strings.Contains(out, "refs/remotes/origin/x") {
		t.Fatalf("notes only (%d %s):\n%s", code, msg, out)
	}
	runGit(t, s, "commit", "-q", "--allow-empty", "-m", "empty")
	out, msg, code = runBrood(t, "diff", sess.ID)
	if code != ExitOK || strings.Contains(out, "no changes") || !strings.HasPrefix(out, "commits (") ||
		!strings.Contains(out, "refs/heads/master") || !strings.Contains(out, "  note: ") {
		t.Fatalf("commits only (%d %s):\n%s", code, msg, out)
	}
}

// TestUndoBranchesOnly: undo of an apply that only created a branch says it removed the
// branch and not "nothing to undo"; a second undo says "nothing to undo".
func TestUndoBranchesOnly(t *testing.T) {
	sess, _ := gitSession(t)
	runGit(t, sess.SnapshotDir(), "commit", "-q", "--allow-empty", "-m", "empty")
	if out, code := applyCLI(t, nil, "apply", sess.ID, "--all", "--yes"); code != ExitOK || !strings.Contains(out, "created branch") {
		t.Fatalf("apply (%d):\n%s", code, out)
	}
	out, code := applyCLI(t, nil, "undo", sess.ID)
	if code != ExitOK || strings.Contains(out, "nothing to undo") || !strings.Contains(out, "removed branch brood/"+sess.ID+"/master") {
		t.Fatalf("undo (%d):\n%s", code, out)
	}
	if out, code := applyCLI(t, nil, "undo", sess.ID); code != ExitOK || out != "nothing to undo in session "+sess.ID+"\n" {
		t.Fatalf("second undo (%d):\n%q", code, out)
	}
}

// TestLinkedWorktreeIsANote: a workspace whose .git is a gitdir file (a linked worktree)
// gets a note that its commits are not reviewed, not a refused ref: apply --all --yes
// applies the files and exits 0, diff exits 0.
func TestLinkedWorktreeIsANote(t *testing.T) {
	sess := newStoppedSession(t, map[string]string{".git": "gitdir: /elsewhere/.git/worktrees/w\n", "a.txt": "a\n"}, false)
	difftest.WriteFiles(sess.SnapshotDir(), map[string]string{"a.txt": "A\n"})
	const note = "note: commits not reviewed: .git is a gitdir file (linked worktree)\n"
	out, msg, code := runBrood(t, "diff", sess.ID)
	if code != ExitOK || out != "modified  a.txt\n"+note {
		t.Fatalf("diff (%d %s):\n%q", code, msg, out)
	}
	out, code = applyCLI(t, nil, "apply", sess.ID, "--all", "--yes")
	if code != ExitOK || !strings.Contains(out, note) || strings.Contains(out, "refused") || wFile(t, sess, "a.txt") != "A\n" {
		t.Fatalf("apply (%d):\n%s", code, out)
	}
}

// TestReviewCommitsOnly: brood review of a session with commits and no file change does
// not say "no changes" before creating the branch.
func TestReviewCommitsOnly(t *testing.T) {
	sess, _ := gitSession(t)
	runGit(t, sess.SnapshotDir(), "commit", "-q", "--allow-empty", "-m", "empty")
	out, code := applyCLI(t, nil, "review", sess.ID, "--all")
	if code != ExitOK || strings.Contains(out, "no changes") || !strings.Contains(out, "created branch brood/"+sess.ID+"/master") {
		t.Fatalf("review --all (%d):\n%s", code, out)
	}
}
