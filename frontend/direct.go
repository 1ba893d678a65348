package frontend

import (
	"context"
	"errors"
	"fmt"
	"os"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/helperclient"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/helper/api"
)

// Direct mode (RunSpec.VM.Direct): the VM mounts the workspace itself, read-write, with
// no snapshot and no review. The helper refuses it under the system policy's
// forbid_direct; the command line asks for it only with an explicit confirmation.

// newSession creates the run's session: the snapshot of spec.Workspace (takeSnapshot),
// or in direct mode a session without one (Session.Direct, state ready).
func (w *Workflow) newSession(ctx context.Context, spec RunSpec) (*session.Session, error) {
	if !spec.VM.Direct {
		return w.takeSnapshot(ctx, spec.Workspace, spec.Agent)
	}
	fi, err := os.Stat(spec.Workspace)
	if err != nil || !fi.IsDir() {
		return nil, &InvalidError{fmt.Errorf("run: workspace %s is not a directory", diff.Escape(spec.Workspace))}
	}
	sess, err := session.Create(spec.Workspace)
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	sess.Agent, sess.Direct = spec.Agent, true
	if err := sess.SetState(session.StateReady); err != nil {
		return nil, err
	}
	w.progress().Printf("session %s (workspace %s, direct: no snapshot, no review)", sess.ID, diff.Escape(sess.Workspace))
	return sess, nil
}

// directAllowed asks the helper, for a run in direct mode, whether the system policy
// forbids it (api.Policy.DirectForbidden, from resolve_policy with the run's egress
// inputs) before any session exists: a forbidden one is a *RefusedError wrapping
// api.ErrPolicy (the CLI exits 3). A helper without resolve_policy (CodeUnknownCall)
// is left to refuse at StartVM; any other error of the call ends the run.
func (w *Workflow) directAllowed(ctx context.Context, hc helperclient.Client, spec RunSpec) error {
	if !spec.VM.Direct {
		return nil
	}
	p, err := hc.ResolvePolicy(ctx, spec.VM.PolicyArgs())
	switch {
	case api.IsCode(err, api.CodeUnknownCall):
		return nil
	case api.IsCode(err, api.CodePolicy):
		return &RefusedError{fmt.Errorf("run in direct mode: %w", err)}
	case err != nil:
		return fmt.Errorf("run in direct mode: ask the helper's policy: %w", err)
	case p.DirectForbidden:
		return &RefusedError{fmt.Errorf("run in direct mode: %w: the system policy forbids it (forbid_direct = true; brood policy show)", api.ErrPolicy)}
	}
	return nil
}

// bootFailed ends a run whose VM did not start (boot's error err): a snapshot session is
// kept for a later run or rm; a direct session, which holds nothing, is removed and no
// session is returned, and so is one the helper refused by policy (policyRefusal), whose
// error is then a *RefusedError.
func bootFailed(res *RunResult, err error) (*RunResult, error) {
	refused := policyRefusal(err)
	if !res.Session.Direct && !refused {
		return res, err
	}
	if rerr := session.Remove(res.Session.ID); rerr != nil {
		return res, fmt.Errorf("%w (and removing session %s failed: %v; brood session rm %s removes it)", err, res.Session.ID, rerr, res.Session.ID)
	}
	if refused {
		return nil, &RefusedError{fmt.Errorf("%w (nothing was kept)", err)}
	}
	return nil, err
}

// policyRefusal reports whether err is the helper refusing a VM by policy (CodePolicy,
// api.ErrPolicy): the run is refused (exit 3) and leaves no session behind.
func policyRefusal(err error) bool {
	return api.IsCode(err, api.CodePolicy) || errors.Is(err, api.ErrPolicy)
}

// keptNote is the line the error of a failed VM start ends with: how to remove the
// snapshot kept, or nothing for a direct session (bootFailed removes it).
func keptNote(sess *session.Session) string {
	if sess.Direct {
		return ""
	}
	return "\nthe snapshot is kept: brood session rm " + sess.ID + " removes it"
}

// shareDir is the directory the VM mounts: the snapshot, or the workspace in direct mode.
func shareDir(sess *session.Session) string {
	if sess.Direct {
		return sess.Workspace
	}
	return sess.SnapshotDir()
}

// ErrDirectSession: the session ran in direct mode, so it has no snapshot and nothing
// to diff, review, apply or undo.
var ErrDirectSession = errors.New("ran in direct mode")

// RefuseDirect returns, for a session that ran in direct mode, the refusal of command op
// ("diff", "apply"): an *InvalidError (the CLI exits 2) wrapping ErrDirectSession that
// names the session and its workspace. It returns nil for a snapshot session.
func RefuseDirect(op string, sess *session.Session) error {
	if !sess.Direct {
		return nil
	}
	return &InvalidError{fmt.Errorf("%s session %s: it %w: the agent wrote the workspace %s itself, with no snapshot; there is nothing to review, apply or undo",
		op, sess.ID, ErrDirectSession, diff.Escape(sess.Workspace))}
}
