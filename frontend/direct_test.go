package frontend

import (
	"errors"
	"testing"

	"brood.dev/brood/frontend/session"
)

// TestDirectSessionNotDiffable: the workflow refuses to diff, open the gate of or undo a
// session that ran in direct mode (InvalidError wrapping ErrDirectSession), before it
// looks for the snapshot it does not have.
func TestDirectSessionNotDiffable(t *testing.T) {
	r := newRig(t)
	sess, err := session.Create(r.ws)
	if err != nil {
		t.Fatal(err)
	}
	sess.Direct = true
	if err := sess.SetState(session.StateStopped); err != nil {
		t.Fatal(err)
	}
	check := func(op string, err error) {
		t.Helper()
		var inv *InvalidError
		if !errors.As(err, &inv) || !errors.Is(err, ErrDirectSession) {
			t.Errorf("%s: %v", op, err)
		}
	}
	_, err = r.wf.Diff(t.Context(), sess)
	check("diff", err)
	_, err = r.wf.OpenGate(t.Context(), "apply", sess)
	check("open gate", err)
	_, err = r.wf.Undo(t.Context(), sess, nil)
	check("undo", err)
}
