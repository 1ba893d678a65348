package frontend

import (
	"context"
	"errors"
	"fmt"
	"os"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/session"
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
