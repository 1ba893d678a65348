package cli

import (
	"strings"
	"testing"

	"brood.dev/brood/frontend/session"
	"brood.dev/brood/helper/api"
)

// TestUndoRefusesRunningSession: undo on a session whose VM the helper reports alive is
// refused as apply and diff are (exit 3, naming brood session stop), and nothing is
// reverted; once the VM is gone the undo runs.
func TestUndoRefusesRunningSession(t *testing.T) {
	sess := applySession(t, applyFiles, applyAgent)
	if out, code := applyCLI(t, nil, "apply", sess.ID, "--all", "--yes"); code != ExitRefused || wFile(t, sess, "a.txt") == "a\n" { // a high-risk change is left out
		t.Fatalf("apply: exit %d\n%s", code, out)
	}
	f := newFakeHelper(t)
	f.Sessions = []api.Session{{ID: "0000abcd", State: api.SessionRunning}}
	sess.HelperSession = "0000abcd"
	if err := sess.SetState(session.StateRunning); err != nil {
		t.Fatal(err)
	}
	out, msg, code := runBrood(t, "undo", sess.ID)
	if code != ExitRefused || !strings.Contains(msg, "its VM is running") || !strings.Contains(msg, "brood session stop "+sess.ID) ||
		strings.Contains(out, "nothing to undo") || strings.Contains(out, "reverted") {
		t.Fatalf("undo of a running session: exit %d, error %q\n%s", code, msg, out)
	}
	if wFile(t, sess, "a.txt") == "a\n" {
		t.Fatal("undo of a running session reverted a.txt")
	}
	f.Sessions = nil // the VM is gone
	if out, _, code := runBrood(t, "undo", sess.ID); code != ExitOK || !strings.Contains(out, "reverted ") || wFile(t, sess, "a.txt") != "a\n" {
		t.Fatalf("undo after the VM ended: exit %d\n%s", code, out)
	}
}
