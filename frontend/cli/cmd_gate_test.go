package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"brood.dev/brood/frontend"
	"brood.dev/brood/frontend/gitconfig"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/frontend/snapshot"
)

// TestSessionIDErrors: a missing, malformed or unknown session id is a usage error
// (exit 2) from every command that takes one, checked before the terminal, and the
// message points to brood session list.
func TestSessionIDErrors(t *testing.T) {
	t.Setenv("BROOD_STATE_DIR", t.TempDir())
	for _, args := range [][]string{
		{"diff"}, {"review"}, {"apply"}, {"undo"},
		{"diff", "../../etc"}, {"review", "../../etc"}, {"apply", "../../etc", "--all", "--yes"}, {"undo", "../../etc"},
		{"diff", "0123456789ab"}, {"review", "0123456789ab", "--all"}, {"apply", "0123456789ab", "--all", "--yes"}, {"undo", "0123456789ab"},
	} {
		out, code := applyCLI(t, nil, args...)
		if code != ExitUsage || !strings.Contains(out, "brood session list") {
			t.Errorf("brood %s: exit %d, want %d naming brood session list:\n%s", strings.Join(args, " "), code, ExitUsage, out)
		}
		if len(args) == 1 && !strings.Contains(out, "brood "+args[0]+" ID") {
			t.Errorf("brood %s: %q does not show the usage", args[0], out)
		}
		if strings.Contains(out, "terminal") {
			t.Errorf("brood %s: complains about the terminal before the id:\n%s", strings.Join(args, " "), out)
		}
	}
}

// TestDiffStatDirectories: --stat names added directories as such, never "0 -> 0 bytes",
// and does not count them as files.
func TestDiffStatDirectories(t *testing.T) {
	sess := applySession(t, map[string]string{"a.txt": "a\n"}, map[string]string{"newdir/sub/f.txt": "f\n"})
	out, code := applyCLI(t, nil, "diff", sess.ID, "--stat")
	if code != ExitOK || strings.Contains(out, "0 -> 0 bytes") || !strings.Contains(out, "newdir | added directory") ||
		!strings.Contains(out, "1 file(s) changed") {
		t.Errorf("diff --stat: exit %d\n%s", code, out)
	}
}

// TestUndoExceptCommand: a refused undo names the changed paths and the command that
// reverts the rest; --except does that, relative to the current directory inside W, and
// the session is no longer applied afterwards.
func TestUndoExceptCommand(t *testing.T) {
	sess := applySession(t, applyFiles, applyAgent)
	if out, code := applyCLI(t, nil, "apply", sess.ID, "--yes", "a.txt", "b.txt", "new/n.txt"); code != ExitOK {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	os.WriteFile(filepath.Join(sess.Workspace, "new/n.txt"), []byte("mine\n"), 0o644)
	out, code := applyCLI(t, nil, "undo", sess.ID)
	if code != ExitRefused || !strings.Contains(out, "changed since the apply: new/n.txt") ||
		!strings.Contains(out, "brood undo "+sess.ID+" --except new/n.txt") || !strings.Contains(out, "all or nothing") {
		t.Fatalf("undo after a change: exit %d\n%s", code, out)
	}
	t.Chdir(filepath.Join(sess.Workspace, "new"))
	out, code = applyCLI(t, nil, "undo", sess.ID, "--except", "n.txt")
	if code != ExitOK || !strings.Contains(out, "reverted 2 change(s)") || !strings.Contains(out, "kept as is (--except): new/n.txt") {
		t.Fatalf("undo --except: exit %d\n%s", code, out)
	}
	if wFile(t, sess, "a.txt") != "a\n" || wFile(t, sess, "b.txt") != "b\n" || wFile(t, sess, "new/n.txt") != "mine\n" {
		t.Errorf("W after undo --except")
	}
	if s, err := session.Open(sess.ID); err != nil || s.State == session.StateApplied {
		t.Errorf("state after undo: %+v %v", s, err)
	}
	if out, code := applyCLI(t, nil, "undo", sess.ID, "--except", "../c.txt"); code != ExitOK || !strings.Contains(out, "nothing to undo") {
		t.Errorf("undo again: exit %d\n%s", code, out)
	}
}

// TestApplyPathRelativeToCwd: PATH arguments are taken relative to the current directory
// when it is inside the workspace; a path outside the workspace is a usage error.
func TestApplyPathRelativeToCwd(t *testing.T) {
	sess := applySession(t, map[string]string{"src/a.txt": "a\n", "a.txt": "top\n"}, map[string]string{"src/a.txt": "A\n", "a.txt": "TOP\n"})
	t.Chdir(filepath.Join(sess.Workspace, "src"))
	if out, code := applyCLI(t, nil, "apply", sess.ID, "--yes", "a.txt"); code != ExitOK {
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	if wFile(t, sess, "src/a.txt") != "A\n" || wFile(t, sess, "a.txt") != "top\n" {
		t.Errorf("apply a.txt from src/: src/a.txt=%q a.txt=%q", wFile(t, sess, "src/a.txt"), wFile(t, sess, "a.txt"))
	}
	if out, code := applyCLI(t, nil, "apply", sess.ID, "--yes", "../../elsewhere"); code != ExitUsage || !strings.Contains(out, "outside the workspace") {
		t.Errorf("apply outside W: exit %d\n%s", code, out)
	}
}

// TestSanitizeReportCredentials: a URL whose credentials were stripped is reported as
// "credentials removed" with the reason (user info or query parameter), not as a removed
// variable; a URL removed for a control character is reported as removed.
func TestSanitizeReportCredentials(t *testing.T) {
	rep := &snapshot.Report{Sanitized: []snapshot.SanitizedFile{{Path: ".git/config", Removed: []gitconfig.Removal{
		{Key: "remote.origin.url", Reason: gitconfig.ReasonURLCredentials, Rewritten: true},
		{Key: "remote.origin.url", Reason: gitconfig.ReasonURLQuery, Rewritten: true},
		{Key: "core.fsmonitor", Reason: gitconfig.ReasonCommand},
		{Key: "remote.evil.url", Reason: gitconfig.ReasonURLControl},
	}}}}
	got := strings.Join(frontend.SnapshotReport(rep, false), "\n")
	if !strings.Contains(got, "remote.origin.url: credentials removed (the URL is kept): credentials in URL\n") ||
		!strings.Contains(got, "remote.origin.url: credentials removed (the URL is kept): credential query parameter in URL\n") ||
		strings.Contains(got, "removed remote.origin.url") || !strings.Contains(got, "removed core.fsmonitor") ||
		!strings.Contains(got, "removed remote.evil.url (URL with a control character)") {
		t.Errorf("report:\n%s", got)
	}
}
