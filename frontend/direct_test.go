package frontend

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"brood.dev/brood/frontend/session"
	"brood.dev/brood/helper/api"
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

// directSpec is a run of the rig in direct mode.
func directSpec(r *rig) RunSpec {
	return RunSpec{Agent: "shell", Describe: "the command", Workspace: r.ws,
		VM: api.StartVMArgs{Image: "test", Direct: true, Egress: "locked"}, Command: "true"}
}

// TestDirectForbiddenBeforeSession: under forbid_direct (resolve_policy says
// DirectForbidden) a direct run is refused (RefusedError wrapping api.ErrPolicy) before
// any session exists, in brood or in the helper; the policy was asked with the run's
// egress inputs.
func TestDirectForbiddenBeforeSession(t *testing.T) {
	r := newRig(t)
	r.fake.Policy = &api.Policy{Profile: "locked", DirectForbidden: true}
	res, err := r.wf.Run(t.Context(), directSpec(r), Stdio{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}})
	var refused *RefusedError
	if !errors.As(err, &refused) || !errors.Is(err, api.ErrPolicy) || !strings.Contains(err.Error(), "forbid_direct") || res != nil {
		t.Fatalf("run: %v, result %+v", err, res)
	}
	if got := r.fake.Calls(); got != "hello resolve_policy" {
		t.Errorf("helper calls %q", got)
	}
	if r.fake.PolicyArgs().Egress != "locked" {
		t.Errorf("resolve_policy args %+v", r.fake.PolicyArgs())
	}
	if ss, err := session.List(); err != nil || len(ss) != 0 {
		t.Errorf("sessions %v, %v", ss, err)
	}
	// Allowed: the run goes on to the VM on the workspace itself.
	r.fake.Policy.DirectForbidden = false
	if res, err := r.wf.Run(t.Context(), directSpec(r), Stdio{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}}); err != nil ||
		!res.Session.Direct || r.fake.Share() != r.ws {
		t.Fatalf("allowed: %v, share %q", err, r.fake.Share())
	}
}

// TestDirectStartRefusedRemovesSession: a helper that refuses the direct StartVM itself
// (one without resolve_policy) leaves no direct session behind: the helper session is
// destroyed and brood's session directory removed.
func TestDirectStartRefusedRemovesSession(t *testing.T) {
	r := newRig(t)
	r.fake.StartErr = &api.Error{Code: api.CodePolicy, Message: "start VM in direct mode: forbid_direct = true"}
	res, err := r.wf.Run(t.Context(), directSpec(r), Stdio{In: strings.NewReader(""), Out: &bytes.Buffer{}, Err: &bytes.Buffer{}})
	if !errors.Is(err, api.ErrPolicy) || strings.Contains(err.Error(), "snapshot is kept") || res != nil {
		t.Fatalf("run: %v, result %+v", err, res)
	}
	if got := r.fake.Calls(); !strings.HasSuffix(got, "start_vm destroy_session") {
		t.Errorf("helper calls %q", got)
	}
	if ss, err := session.List(); err != nil || len(ss) != 0 {
		t.Errorf("sessions %v, %v", ss, err)
	}
}
