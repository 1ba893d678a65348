package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/diff/difftest"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/review"
	"brood.dev/brood/frontend/session"
)

// reviewSession makes a stopped session whose snapshot was taken from a workspace holding
// files (with base copies of them in the session's base/ for three-way merges), applies
// agent to S, and returns the session.
func reviewSession(t *testing.T, files map[string]string, agent map[string]string) *session.Session {
	t.Helper()
	sess := newStoppedSession(t, files, true)
	if err := difftest.WriteFiles(sess.SnapshotDir(), agent); err != nil {
		t.Fatal(err)
	}
	return sess
}

// reviewCmd runs `brood review args...` with stdin not a terminal and returns the output,
// the error text and the exit code Main would return.
func reviewCmd(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	return brood(t, nil, append([]string{"review"}, args...)...) // cmd_apply_test.go
}

func readW(t *testing.T, sess *session.Session, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(sess.Workspace, path))
	if errors.Is(err, os.ErrNotExist) {
		return "<absent>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The workspace already has .git/hooks/ and .github/workflows/, so the agent's files
// there are the only changes (not their directories).
var reviewFiles = map[string]string{"a.txt": "a\n", "b.txt": "b\n", ".git/hooks/README": "x\n", ".github/workflows/old.yml": "x\n"}
var reviewAgent = map[string]string{
	"a.txt":                    "a\nA\n",
	"b.txt":                    "B\n",
	"new.txt":                  "new\n",
	".github/workflows/ci.yml": "run: curl x | sh\n",
	".git/hooks/pre-commit":    "#!/bin/sh\n",
}

func TestReviewNonTTYNeedsAChoice(t *testing.T) {
	sess := reviewSession(t, reviewFiles, reviewAgent)
	for _, args := range [][]string{
		{sess.ID},
		{sess.ID, "--include-risky"},
		{sess.ID, "--all", "--include-risky"},
		{sess.ID, "--reject-all", "--all"},
		{sess.ID, "--reject-all", "a.txt"},
		{sess.ID, "no/such/path"},
	} {
		_, msg, code := reviewCmd(t, args...)
		if code != ExitUsage {
			t.Errorf("%q: exit %d (%s), want %d", args, code, msg, ExitUsage)
		}
		if len(args) == 1 && !(strings.Contains(msg, "--all") && strings.Contains(msg, "--reject-all") && strings.Contains(msg, "PATH")) {
			t.Errorf("message does not name the flags: %s", msg)
		}
	}
	if readW(t, sess, "a.txt") != "a\n" || readW(t, sess, "new.txt") != "<absent>" {
		t.Error("W changed")
	}
}

func TestReviewRejectAll(t *testing.T) {
	sess := reviewSession(t, reviewFiles, reviewAgent)
	out, msg, code := reviewCmd(t, sess.ID, "--reject-all")
	if code != ExitOK {
		t.Fatalf("exit %d: %s\n%s", code, msg, out)
	}
	if readW(t, sess, "a.txt") != "a\n" || readW(t, sess, "b.txt") != "b\n" || readW(t, sess, "new.txt") != "<absent>" {
		t.Error("--reject-all changed W")
	}
	recs, err := review.ReadRecords(sess.Dir)
	if err != nil || len(recs) != 1 || recs[0].Mode != "reject-all" || recs[0].Applied {
		t.Fatalf("records %+v, %v", recs, err)
	}
	for _, d := range recs[0].Decisions {
		if d.Verdict != review.Reject {
			t.Errorf("%s recorded as %s", d.Path, d.Verdict)
		}
	}
	if len(recs[0].Decisions) != 5 {
		t.Errorf("recorded %d decisions, want 5", len(recs[0].Decisions))
	}
}

func TestReviewAll(t *testing.T) {
	sess := reviewSession(t, reviewFiles, reviewAgent)
	out, msg, code := reviewCmd(t, sess.ID, "--all")
	if code != ExitRefused {
		t.Fatalf("exit %d (%s), want 3 for the refused hook and the risky CI file\n%s", code, msg, out)
	}
	for path, want := range map[string]string{"a.txt": "a\nA\n", "b.txt": "B\n", "new.txt": "new\n",
		".github/workflows/ci.yml": "<absent>", ".git/hooks/pre-commit": "<absent>"} {
		if got := readW(t, sess, path); got != want {
			t.Errorf("%s = %q, want %q", path, got, want)
		}
	}
	if !strings.Contains(out, "--all never accepts it") || !strings.Contains(out, "refused: protected path") {
		t.Errorf("output:\n%s", out)
	}

	sess = reviewSession(t, reviewFiles, reviewAgent)
	out, msg, code = reviewCmd(t, sess.ID, "--all", "--include-risky")
	if code != ExitUsage || !strings.Contains(msg, "--all never accepts high-risk changes") ||
		readW(t, sess, ".github/workflows/ci.yml") != "<absent>" || readW(t, sess, ".git/hooks/pre-commit") != "<absent>" {
		t.Errorf("--include-risky: exit %d (%s)\n%s", code, msg, out)
	}
}

func TestReviewPaths(t *testing.T) {
	sess := reviewSession(t, reviewFiles, reviewAgent)
	out, msg, code := reviewCmd(t, sess.ID, "b.txt", "new.txt")
	if code != ExitOK {
		t.Fatalf("exit %d (%s)\n%s", code, msg, out)
	}
	if readW(t, sess, "a.txt") != "a\n" || readW(t, sess, "b.txt") != "B\n" || readW(t, sess, "new.txt") != "new\n" {
		t.Errorf("W after PATH review: a=%q b=%q new=%q", readW(t, sess, "a.txt"), readW(t, sess, "b.txt"), readW(t, sess, "new.txt"))
	}
	// A named high-risk path still needs --include-risky.
	out, _, code = reviewCmd(t, sess.ID, ".github")
	if code != ExitRefused || readW(t, sess, ".github/workflows/ci.yml") != "<absent>" {
		t.Errorf("risky path without --include-risky: exit %d\n%s", code, out)
	}
	// Named exactly, it is the developer's explicit choice.
	out, _, code = reviewCmd(t, sess.ID, ".github/workflows/ci.yml")
	if code != ExitOK || readW(t, sess, ".github/workflows/ci.yml") != "run: curl x | sh\n" {
		t.Errorf("risky path named exactly: exit %d\n%s", code, out)
	}
}

// ptyScreen collects what a child writes to a pseudo-terminal.
type ptyScreen struct {
	mu  sync.Mutex
	buf bytes.Buffer
	ch  chan struct{}
}

func (s *ptyScreen) copy(r io.Reader) {
	b := make([]byte, 4096)
	for {
		n, err := r.Read(b)
		s.mu.Lock()
		s.buf.Write(b[:n])
		s.mu.Unlock()
		select {
		case s.ch <- struct{}{}:
		default:
		}
		if err != nil {
			close(s.ch)
			return
		}
	}
}

func (s *ptyScreen) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// expect waits until the screen shows want (counted from the n-th occurrence) or fails.
func (s *ptyScreen) expect(t *testing.T, want string, n int) {
	t.Helper()
	s.waitFor(t, fmt.Sprintf("%q", want), func(screen string) bool { return strings.Count(screen, want) >= n })
}

// waitFor waits (up to 20 s) until shown(the screen) holds, or fails t naming what.
func (s *ptyScreen) waitFor(t *testing.T, what string, shown func(string) bool) {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for !shown(s.String()) {
		select {
		case _, ok := <-s.ch:
			if !ok && !shown(s.String()) {
				t.Fatalf("child exited before showing %s:\n%s", what, s.String())
			}
		case <-deadline:
			t.Fatalf("timed out waiting for %s:\n%s", what, s.String())
		}
	}
}

// promptsShown counts the review's prompts on screen: each is painted (bold) and ends
// "? " or "] " before its colour reset; nothing else the review paints does.
func promptsShown(screen string) int {
	return strings.Count(screen, "? \x1b[0m") + strings.Count(screen, "] \x1b[0m")
}

// answer waits until the screen shows the n-th prompt, then types keys: the review
// discards what was typed before its prompt showed (review.Terminal.FlushInput).
func (s *ptyScreen) answer(t *testing.T, ptmx *os.File, n int, keys string) {
	t.Helper()
	s.waitFor(t, fmt.Sprintf("prompt %d", n), func(screen string) bool { return promptsShown(screen) >= n })
	if _, err := ptmx.Write([]byte(keys)); err != nil {
		t.Fatal(err)
	}
}

// TestReviewTTYChild is the brood process of TestReviewTTY: the test binary re-executed
// on the pseudo-terminal runs only this test, which runs brood's Main with the arguments
// after "--" and exits with its status.
func TestReviewTTYChild(t *testing.T) {
	if os.Getenv("BROOD_TEST_AS_BROOD") != "1" {
		t.Skip("only runs as the child of TestReviewTTY")
	}
	args := os.Args
	for i, a := range args {
		if a == "--" {
			args = args[i+1:]
			break
		}
	}
	os.Exit(Main(args))
}

// startReviewPTY starts `brood review id` as a child on a new pseudo-terminal.
func startReviewPTY(t *testing.T, id string) (*exec.Cmd, *os.File, *ptyScreen) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestReviewTTYChild$", "--", "review", id)
	cmd.Env = append(os.Environ(), "BROOD_TEST_AS_BROOD=1", "TERM=xterm", "NO_COLOR=")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 120})
	if err != nil {
		t.Fatalf("start brood on a pty: %v", err)
	}
	t.Cleanup(func() { ptmx.Close() })
	scr := &ptyScreen{ch: make(chan struct{}, 1)}
	go scr.copy(ptmx)
	return cmd, ptmx, scr
}

// TestReviewTTYAbort: Ctrl-C at a prompt ends the review with an error and applies
// nothing, even after changes were accepted.
func TestReviewTTYAbort(t *testing.T) {
	sess := reviewSession(t, reviewFiles, map[string]string{"a.txt": "A\n", "b.txt": "B\n"})
	cmd, ptmx, scr := startReviewPTY(t, sess.ID)
	scr.expect(t, "[1/2]", 1)
	scr.answer(t, ptmx, 1, "a")
	scr.expect(t, "[2/2]", 1)
	scr.answer(t, ptmx, 2, "\x03")
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != ExitError {
		t.Fatalf("exit after Ctrl-C: %v", err)
	}
	scr.expect(t, "review aborted; nothing applied", 1)
	if readW(t, sess, "a.txt") != "a\n" || readW(t, sess, "b.txt") != "b\n" {
		t.Errorf("W changed after an aborted review")
	}
}

// TestReviewTTY runs `brood review ID` on a real pseudo-terminal (creack/pty): it types the
// keys a developer would, checks the screen, then W.
func TestReviewTTY(t *testing.T) {
	old := "l1\nl2\nl3\nl4\nl5\nl6\nl7\nl8\nl9\nl10\nl11\nl12\nl13\nl14\nl15\n"
	files := map[string]string{"a.txt": old, "b.txt": "b\n", "c.txt": old, ".git/hooks/README": "x\n", ".github/workflows/old.yml": "x\n"}
	agent := map[string]string{
		"a.txt":                             strings.Replace(strings.Replace(old, "l2\n", "L2\n", 1), "l14\n", "L14\n", 1),
		"b.txt":                             "B\n",
		"evil.txt":                          "\x1b]52;c;ZXZpbA==\a\x1b[2Jgotcha\rhidden\n",
		"evil\x1b]52;c;bmFtZQ==\a\r\x1b[2J": "named\n",
		".github/workflows/ci.yml":          "run: x\n",
		".git/hooks/pre-commit":             "#!/bin/sh\n",
		"c.txt":                             strings.Replace(old, "l13\n", "agent 13\n", 1),
	}
	sess := reviewSession(t, files, agent)
	// The developer edits c.txt after the snapshot: a conflict with a clean merge.
	if err := os.WriteFile(filepath.Join(sess.Workspace, "c.txt"), []byte(strings.Replace(old, "l2\n", "mine 2\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd, ptmx, scr := startReviewPTY(t, sess.ID)
	// Changes come sorted by path: .git/hooks/pre-commit, .github/workflows/ci.yml, a.txt,
	// b.txt, c.txt, evil.txt. Each step waits until the screen shows its text (the nth
	// time), then answers the next prompt with its keys.
	for i, st := range []struct {
		shows string
		nth   int
		keys  string
	}{
		{"cannot be accepted", 1, "a"}, // refused: a is refused
		{"this change cannot be accepted", 1, "r"},
		{"HIGH RISK: ", 1, "a"},
		{"really accept? [y/N]", 1, "y"},
		{"a.txt", 1, "h"},
		{"Apply this hunk", 1, "y"},
		{"Apply this hunk", 2, "n"},
		{"b.txt", 1, "r"},
		{"A three-way merge is available", 1, "m"},
		{"Accept the merged result", 1, "y"},
		// The hostile name sorts before evil.txt ('\x1b' < '.'); the diff refuses it.
		{`evil\x1b]52;c;bmFtZQ==\a\r\x1b[2J`, 1, "r"},
		{"evil.txt", 1, "a"},
		{"to apply", 1, "y"},
	} {
		scr.expect(t, st.shows, st.nth)
		scr.answer(t, ptmx, i+1, st.keys)
	}
	scr.expect(t, "applied 4 change(s)", 1)
	if err := cmd.Wait(); err != nil {
		t.Fatalf("brood review: %v\n%s", err, scr.String())
	}
	screen := scr.String()

	for _, bad := range []string{"\x1b]52", "\x1b[2J", "\a", "gotcha\rhidden"} {
		if strings.Contains(screen, bad) {
			t.Errorf("raw %q reached the terminal", bad)
		}
	}
	for _, s := range []string{`+\x1b]52;c;ZXZpbA==\a\x1b[2Jgotcha\rhidden`, "\x1b[1;31mHIGH RISK", "\x1b[31m-l2", "\x1b[32m+L2",
		"refused", "protected path", "conflict", "three-way merge is clean", "4 to apply, 3 rejected, 0 skipped"} {
		if !strings.Contains(screen, s) {
			t.Errorf("screen lacks %q", s)
		}
	}
	want := map[string]string{
		"a.txt":                    strings.Replace(old, "l2\n", "L2\n", 1), // first hunk only
		"b.txt":                    "b\n",
		"c.txt":                    strings.Replace(strings.Replace(old, "l2\n", "mine 2\n", 1), "l13\n", "agent 13\n", 1),
		"evil.txt":                 agent["evil.txt"],
		".github/workflows/ci.yml": "run: x\n",
		".git/hooks/pre-commit":    "<absent>",
	}
	for p, w := range want {
		if got := readW(t, sess, p); got != w {
			t.Errorf("W %s = %q, want %q", p, got, w)
		}
	}
	if t.Failed() || os.Getenv("BROOD_SHOW_SCREEN") != "" {
		t.Logf("screen:\n%s", screen)
	}
}

// conflictDecisions reviews the changes of sess with keys (no terminal needed: the session
// reads keys from a string) and returns the decisions.
func conflictDecisions(t *testing.T, sess *session.Session, keys string) ([]review.Decision, *manifest.Manifest) {
	t.Helper()
	m, err := manifest.Read(sess.ManifestPath())
	if err != nil {
		t.Fatal(err)
	}
	changes, err := diff.Compute(t.Context(), sess.Workspace, sess.SnapshotDir(), m, diff.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 1 || changes[0].Kind != diff.KindConflict {
		t.Fatalf("changes %+v, want one conflict", changes)
	}
	var out bytes.Buffer
	s := &review.Interactive{Changes: changes, In: strings.NewReader(keys), Out: &out,
		Trees: review.Trees{W: sess.Workspace, S: sess.SnapshotDir(), Base: sess.BaseDir()}}
	ds, ok, err := s.Run()
	if err != nil || !ok {
		t.Fatalf("review: %v %v\n%s", err, ok, out.String())
	}
	return ds, m
}

// TestReviewConflictFlush proves a resolved conflict reaches W through the real flush, and
// that a file edited again after the developer resolved it is not overwritten.
func TestReviewConflictFlush(t *testing.T) {
	for _, tc := range []struct {
		name, keys, want string
		editAgain        bool
	}{
		{"take theirs", "ty", "agent\n", false},
		{"merge", "myy", "mine\nmiddle\nagent end\n", false},
		{"edited again", "ty", "edited again\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sess := reviewSession(t, map[string]string{"f.txt": "base\nmiddle\nend\n"}, map[string]string{"f.txt": "base\nmiddle\nagent end\n"})
			if tc.name == "take theirs" {
				os.WriteFile(filepath.Join(sess.SnapshotDir(), "f.txt"), []byte("agent\n"), 0o644)
			}
			if err := os.WriteFile(filepath.Join(sess.Workspace, "f.txt"), []byte("mine\nmiddle\nend\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			ds, m := conflictDecisions(t, sess, tc.keys)
			if tc.editAgain {
				os.WriteFile(filepath.Join(sess.Workspace, "f.txt"), []byte("edited again\n"), 0o644)
			}
			var out bytes.Buffer
			res, err := newWorkflow(nil).Commit(t.Context(), &frontend.Gate{Session: sess, Manifest: m}, "interactive", ds, true)
			printApplied(&out, sess, res)
			err = cliErr(err)
			var ee *exitError
			if tc.editAgain {
				if !errors.As(err, &ee) || ee.code != ExitRefused {
					t.Fatalf("apply over a file edited during the review: %v\n%s", err, out.String())
				}
			} else if err != nil {
				t.Fatalf("apply: %v\n%s", err, out.String())
			}
			if got := readW(t, sess, "f.txt"); got != tc.want {
				t.Errorf("W f.txt = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestReviewAllSkipsConflicts(t *testing.T) {
	sess := reviewSession(t, map[string]string{"f.txt": "base\n", "g.txt": "g\n"}, map[string]string{"f.txt": "agent\n", "g.txt": "G\n"})
	if err := os.WriteFile(filepath.Join(sess.Workspace, "f.txt"), []byte("mine\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code := reviewCmd(t, sess.ID, "--all")
	if code != ExitRefused || readW(t, sess, "f.txt") != "mine\n" || readW(t, sess, "g.txt") != "G\n" {
		t.Errorf("--all with a conflict: exit %d, f=%q g=%q\n%s", code, readW(t, sess, "f.txt"), readW(t, sess, "g.txt"), out)
	}
	if !strings.Contains(out, "conflict: W changed since the snapshot") {
		t.Errorf("output does not name the conflict:\n%s", out)
	}
}
