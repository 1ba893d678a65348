package cli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/internal/testenv"
)

// applySession makes a stopped session of a workspace holding files, then writes agent
// into its snapshot.
func applySession(t *testing.T, files, agent map[string]string) *session.Session {
	t.Helper()
	sess := newStoppedSession(t, files, false)
	if err := difftest.WriteFiles(sess.SnapshotDir(), agent); err != nil {
		t.Fatal(err)
	}
	return sess
}

// applyCLI runs the brood command line with stdin in and returns the output (an error's
// text last, after "error: ") and exit code.
func applyCLI(t *testing.T, in io.Reader, args ...string) (string, int) {
	t.Helper()
	out, msg, code := brood(t, in, args...)
	if code != ExitOK {
		out += "error: " + msg + "\n"
	}
	return out, code
}

// brood runs brood's root command with args and stdin in (nil: empty input), stdout and
// stderr into one buffer. It returns that output, the error's text ("" on success) and
// the exit code Main would return (exitCode).
func brood(t *testing.T, in io.Reader, args ...string) (string, string, int) {
	t.Helper()
	root := NewRootCommand()
	var out bytes.Buffer
	if in == nil {
		in = strings.NewReader("")
	}
	root.SetIn(in)
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(args)
	err := root.Execute()
	if err == nil {
		return out.String(), "", ExitOK
	}
	return out.String(), err.Error(), exitCode(err)
}

func wFile(t *testing.T, sess *session.Session, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sess.Workspace, p))
	if errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

var applyFiles = map[string]string{"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n", ".github/workflows/old.yml": "x\n"}
var applyAgent = map[string]string{
	"a.txt":                    "A\n",
	"b.txt":                    "B\n",
	"c.txt":                    "C\n",
	"new/n.txt":                "n\n",
	".github/workflows/ci.yml": "run: curl x | sh\n",
}

func TestApplyCommandNeedsChoiceAndYes(t *testing.T) {
	sess := applySession(t, applyFiles, applyAgent)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"apply", sess.ID}, "--all or PATH"},
		{[]string{"apply", sess.ID, "--all", "a.txt"}, "not both"},
		{[]string{"apply", sess.ID, "--all"}, "add --yes"},
		{[]string{"apply", sess.ID, "a.txt"}, "add --yes"},
		{[]string{"apply", sess.ID, "--yes", "nosuch.txt"}, "no change at or below nosuch.txt"},
	} {
		out, code := applyCLI(t, nil, tc.args...)
		if code != ExitUsage || !strings.Contains(out, tc.want) {
			t.Errorf("%v: exit %d, output %q; want exit 2 and %q", tc.args, code, out, tc.want)
		}
	}
	if wFile(t, sess, "a.txt") != "a\n" {
		t.Errorf("a usage error changed W")
	}
}

// --all leaves out high-risk changes and conflicts (exit 3 naming each); --include-risky
// cannot make --all take the risky one (usage error); a conflict is never applied.
func TestApplyCommandAll(t *testing.T) {
	sess := applySession(t, applyFiles, applyAgent)
	os.WriteFile(filepath.Join(sess.Workspace, "c.txt"), []byte("developer\n"), 0o644)
	out, code := applyCLI(t, nil, "apply", sess.ID, "--all", "--yes")
	if code != ExitRefused {
		t.Fatalf("exit %d, want 3:\n%s", code, out)
	}
	for _, want := range []string{"conflict c.txt: W changed", "skip     added     .github/workflows/ci.yml: high risk (GitHub Actions: workflow)", "applied 4 change(s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if wFile(t, sess, "a.txt") != "A\n" || wFile(t, sess, "new/n.txt") != "n\n" || wFile(t, sess, "c.txt") != "developer\n" ||
		wFile(t, sess, ".github/workflows/ci.yml") != "<absent>" {
		t.Errorf("W after --all: a=%q n=%q c=%q ci=%q", wFile(t, sess, "a.txt"), wFile(t, sess, "new/n.txt"),
			wFile(t, sess, "c.txt"), wFile(t, sess, ".github/workflows/ci.yml"))
	}
	out, code = applyCLI(t, nil, "apply", sess.ID, "--all", "--include-risky", "--yes")
	if code != ExitUsage || !strings.Contains(out, "--all never applies high-risk changes") ||
		wFile(t, sess, ".github/workflows/ci.yml") != "<absent>" || wFile(t, sess, "c.txt") != "developer\n" {
		t.Errorf("--include-risky: exit %d, ci=%q c=%q\n%s", code, wFile(t, sess, ".github/workflows/ci.yml"), wFile(t, sess, "c.txt"), out)
	}
}

// An exact PATH may name a high-risk change; a directory PATH covers it only with
// --include-risky; a refused change is never applied, even named.
func TestApplyCommandPaths(t *testing.T) {
	sess := applySession(t, applyFiles, applyAgent)
	if out, code := applyCLI(t, nil, "apply", sess.ID, "--yes", ".github/"); code != ExitRefused || wFile(t, sess, ".github/workflows/ci.yml") != "<absent>" {
		t.Errorf("directory PATH over a risky change: exit %d\n%s", code, out)
	}
	if out, code := applyCLI(t, nil, "apply", sess.ID, "--yes", ".github/workflows/ci.yml", "a.txt"); code != ExitOK ||
		wFile(t, sess, ".github/workflows/ci.yml") != "run: curl x | sh\n" || wFile(t, sess, "a.txt") != "A\n" || wFile(t, sess, "b.txt") != "b\n" {
		t.Errorf("exact PATHs: exit %d\n%s", code, out)
	}
	// A FIFO in S is refused by the diff: naming it is exit 3 and nothing is written.
	sess2 := applySession(t, applyFiles, map[string]string{"a.txt": "A\n"})
	if err := unix.Mkfifo(filepath.Join(sess2.SnapshotDir(), "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := applyCLI(t, nil, "apply", sess2.ID, "--yes", "pipe")
	if code != ExitRefused || !strings.Contains(out, "refused  pipe:") || wFile(t, sess2, "pipe") != "<absent>" {
		t.Errorf("named refused change: exit %d\n%s", code, out)
	}
}

func TestUndoCommand(t *testing.T) {
	sess := applySession(t, applyFiles, applyAgent)
	if out, code := applyCLI(t, nil, "apply", sess.ID, "--yes", "a.txt", "b.txt", "new/n.txt"); code != ExitOK {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	os.WriteFile(filepath.Join(sess.Workspace, "b.txt"), []byte("edited after apply\n"), 0o644)
	out, code := applyCLI(t, nil, "undo", sess.ID)
	if code != ExitRefused || !strings.Contains(out, "changed since the apply: b.txt") || wFile(t, sess, "a.txt") != "A\n" {
		t.Fatalf("undo after a change: exit %d\n%s", code, out)
	}
	os.WriteFile(filepath.Join(sess.Workspace, "b.txt"), []byte("B\n"), 0o644)
	out, code = applyCLI(t, nil, "undo", sess.ID)
	if code != ExitOK || !strings.Contains(out, "reverted 3 change(s)") {
		t.Fatalf("undo: exit %d\n%s", code, out)
	}
	if wFile(t, sess, "a.txt") != "a\n" || wFile(t, sess, "b.txt") != "b\n" || wFile(t, sess, "new/n.txt") != "<absent>" || wFile(t, sess, "new") != "<absent>" {
		t.Errorf("W after undo: a=%q b=%q n=%q", wFile(t, sess, "a.txt"), wFile(t, sess, "b.txt"), wFile(t, sess, "new/n.txt"))
	}
	if out, code := applyCLI(t, nil, "undo", sess.ID); code != ExitOK || !strings.Contains(out, "nothing to undo") {
		t.Errorf("second undo: exit %d\n%s", code, out)
	}
}

// On a terminal brood apply shows the selection and asks; only "y" applies.
func TestApplyCommandConfirmsOnTTY(t *testing.T) {
	sess := applySession(t, applyFiles, applyAgent)
	for _, answer := range []string{"n\n", "y\n"} {
		out, code := applyOnTTYCode(t, answer, sess.ID, "a.txt")
		if !strings.Contains(out, "apply 1 change(s) to") || code != ExitOK {
			t.Errorf("answer %q: exit %d, output %q", answer, code, out)
		}
		want := map[string]string{"n\n": "a\n", "y\n": "A\n"}[answer]
		if got := wFile(t, sess, "a.txt"); got != want {
			t.Errorf("answer %q: a.txt = %q, want %q", answer, got, want)
		}
	}
}

// An apply interrupted earlier (a journal without completion) is rolled back before
// brood apply computes the diff, then applied again.
func TestApplyCommandRecoversInterrupted(t *testing.T) {
	sess := applySession(t, applyFiles, applyAgent)
	// Simulate a kill after the journal was written and a.txt renamed: copy a journal of
	// an apply, then delete its completion record.
	if out, code := applyCLI(t, nil, "apply", sess.ID, "--yes", "a.txt"); code != ExitOK {
		t.Fatalf("apply: %d\n%s", code, out)
	}
	if err := os.Remove(filepath.Join(sess.JournalDir(), "000001", "done")); err != nil {
		t.Fatal(err)
	}
	out, code := applyCLI(t, nil, "apply", sess.ID, "--yes", "a.txt", "b.txt")
	if code != ExitOK || !strings.Contains(out, "rolled back interrupted apply 000001: 1 path(s) restored") {
		t.Fatalf("apply after interruption: exit %d\n%s", code, out)
	}
	if wFile(t, sess, "a.txt") != "A\n" || wFile(t, sess, "b.txt") != "B\n" {
		t.Errorf("W: a=%q b=%q", wFile(t, sess, "a.txt"), wFile(t, sess, "b.txt"))
	}
}

// brood review, like brood apply, rolls back an interrupted apply before it computes the
// diff: without that it would stop with ErrInterrupted until the user ran undo by hand.
func TestReviewCommandRecoversInterrupted(t *testing.T) {
	sess := applySession(t, applyFiles, applyAgent)
	if out, code := applyCLI(t, nil, "apply", sess.ID, "--yes", "a.txt"); code != ExitOK {
		t.Fatalf("apply: %d\n%s", code, out)
	}
	if err := os.Remove(filepath.Join(sess.JournalDir(), "000001", "done")); err != nil {
		t.Fatal(err)
	}
	out, msg, code := reviewCmd(t, sess.ID, "a.txt", "b.txt")
	if code != ExitOK || !strings.Contains(out, "rolled back interrupted apply 000001: 1 path(s) restored") {
		t.Fatalf("review after interruption: exit %d %s\n%s", code, msg, out)
	}
	if wFile(t, sess, "a.txt") != "A\n" || wFile(t, sess, "b.txt") != "B\n" {
		t.Errorf("W: a=%q b=%q", wFile(t, sess, "a.txt"), wFile(t, sess, "b.txt"))
	}
}

// TestApplyCommandMetadata: a change that would lose an extended attribute of the file
// it replaces (here a regular file with a user attribute, replaced by a symlink) is named
// before anything is written and not applied (exit 3) by review --all and by apply
// without --drop-metadata; apply with it applies it.
func TestApplyCommandMetadata(t *testing.T) {
	sess := metadataSession(t)
	p := filepath.Join(sess.Workspace, "a.txt")
	out, code := applyCLI(t, nil, "review", sess.ID, "--all")
	if code != ExitRefused || !strings.Contains(out, "metadata a.txt: user.xdg.origin.url cannot be kept") ||
		!strings.Contains(out, "not applied by review") || !strings.Contains(out, "not applied a.txt") {
		t.Fatalf("review --all: exit %d:\n%s", code, out)
	}
	if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("a.txt changed by review: %v %v", fi, err)
	}
	out, code = applyCLI(t, nil, "apply", sess.ID, "a.txt", "--yes")
	if code != ExitRefused || !strings.Contains(out, "metadata a.txt: user.xdg.origin.url cannot be kept") ||
		!strings.Contains(out, "not applied without --drop-metadata") || !strings.Contains(out, "not applied a.txt") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
		t.Fatalf("a.txt changed without --drop-metadata: %v %v", fi, err)
	}
	if i, j := strings.Index(out, "metadata a.txt"), strings.Index(out, "applied 0 change(s)"); i < 0 || j < i {
		t.Fatalf("the loss is not printed before the apply:\n%s", out)
	}
	out, code = applyCLI(t, nil, "apply", sess.ID, "a.txt", "--yes", "--drop-metadata")
	if code != ExitOK || !strings.Contains(out, "dropped (--drop-metadata)") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if target, err := os.Readlink(p); err != nil || target != "b.txt" {
		t.Fatalf("a.txt: %q %v", target, err)
	}
}

// metadataSession is a session whose W file a.txt has a user attribute and whose S
// replaced a.txt by a symlink to b.txt.
func metadataSession(t *testing.T) *session.Session {
	t.Helper()
	sess := applySession(t, map[string]string{"a.txt": "a\n", "b.txt": "b\n"}, nil)
	p := filepath.Join(sess.Workspace, "a.txt")
	if err := unix.Lsetxattr(p, "user.xdg.origin.url", []byte("https://example.test/"), 0); err != nil {
		testenv.Skip(t, "the temp filesystem refuses user attributes: "+err.Error())
	}
	s := filepath.Join(sess.SnapshotDir(), "a.txt")
	if err := os.Remove(s); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("b.txt", s); err != nil {
		t.Fatal(err)
	}
	return sess
}
