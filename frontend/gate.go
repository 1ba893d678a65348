package frontend

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"brood.dev/brood/frontend/diff"
	"brood.dev/brood/frontend/flush"
	"brood.dev/brood/frontend/manifest"
	"brood.dev/brood/frontend/session"
	"brood.dev/brood/frontend/snapshot"
	"brood.dev/brood/helper/api"
)

// Gate is a stopped session's changes, computed once: what Review and Apply decide on.
// Run returns the gate of its session (RunResult.Gate); OpenGate opens a kept one.
type Gate struct {
	Session  *session.Session
	Manifest *manifest.Manifest
	Changes  []diff.Change
	// Recovered is the rollback of an interrupted apply that OpenGate did before the
	// diff (Tx "": there was none); its Problems are paths left as they were.
	Recovered flush.Result
}

// helperQueryTimeout bounds the helper calls of Settle and Stop (the helper's StopVM
// waits for the VMM to exit: graceful, then SIGKILL).
const helperQueryTimeout = 60 * time.Second

// OpenGate is the common start of apply and review of a kept session (op names the
// command in errors, "apply"): open the session, settle a session still marked running
// (only a live VM refuses), roll back an interrupted apply, then read the manifest and
// compute the changes — in that order, so the diff never sees a half-applied workspace
// or a running VM's snapshot. The session must exist (the caller opened it by id).
func (w *Workflow) OpenGate(ctx context.Context, op string, sess *session.Session) (*Gate, error) {
	if err := w.diffable(ctx, op, sess); err != nil {
		return nil, err
	}
	rec, err := w.recover(ctx, sess)
	if err != nil {
		return nil, fmt.Errorf("%s session %s: %w", op, sess.ID, err)
	}
	g := &Gate{Session: sess, Recovered: rec}
	if g.Manifest, err = manifest.Read(sess.ManifestPath()); err != nil {
		return g, fmt.Errorf("%s session %s: %w", op, sess.ID, err)
	}
	if g.Changes, err = computeDiff(ctx, sess.Workspace, sess.SnapshotDir(), func() (*manifest.Manifest, error) { return g.Manifest, nil }, diff.Options{}); err != nil {
		return g, fmt.Errorf("%s session %s: %w", op, sess.ID, err)
	}
	return g, nil
}

// Diff computes the changes of a kept session for showing them (brood diff), writing
// nothing: a session still marked running is settled first (a live VM refuses, as in
// OpenGate), but an interrupted apply is not rolled back, so the diff compares the
// workspace as it is.
func (w *Workflow) Diff(ctx context.Context, sess *session.Session) (*Gate, error) {
	if err := w.diffable(ctx, "diff", sess); err != nil {
		return nil, err
	}
	return diffGate(ctx, "diff", sess)
}

// diffable refuses a session that ran in direct mode (RefuseDirect) or whose snapshot is
// incomplete, and settles one marked running (only a live VM refuses).
func (w *Workflow) diffable(ctx context.Context, op string, sess *session.Session) error {
	if err := RefuseDirect(op, sess); err != nil {
		return err
	}
	switch sess.State {
	case session.StateSnapshotting:
		return fmt.Errorf("%s session %s: the snapshot is incomplete (state %s)", op, sess.ID, sess.State)
	case session.StateRunning:
		// Marked running: still so only if the helper says its VM is alive.
		return w.Settle(ctx, sess, op, false)
	}
	return nil
}

// recover rolls back an apply that was killed before its completion record was written,
// so that the diff compares the workspace as it was.
func (w *Workflow) recover(ctx context.Context, sess *session.Session) (flush.Result, error) {
	res, err := flush.Recover(ctx, sess)
	if err != nil {
		return flush.Result{}, fmt.Errorf("recover an interrupted apply: %w", err)
	}
	return res, nil
}

// Settle resolves a session recorded as running (state running in session.json) for the
// command op. It asks the helper whether the VM of s.HelperSession still exists: when it
// does not (the helper does not know the session, lists it stopped, or is not running at
// all — VMs never outlive the helper), s is marked stopped and nil is returned. When the
// VM is alive, nil is returned with s still running if allowRunning, else a
// *RefusedError naming `brood session stop`. A helper that cannot be asked is an error:
// the VM may be running.
func (w *Workflow) Settle(ctx context.Context, s *session.Session, op string, allowRunning bool) error {
	if s.State != session.StateRunning {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, helperQueryTimeout)
	defer cancel()
	alive, err := w.vmAlive(ctx, s)
	if err != nil {
		return fmt.Errorf("%s %s: the session is marked running and the helper cannot say whether its VM is: %w", op, s.ID, err)
	}
	if !alive {
		if err := s.SetState(session.StateStopped); err != nil {
			return fmt.Errorf("%s: %w", op, err)
		}
		return nil
	}
	if allowRunning {
		return nil
	}
	return &RefusedError{fmt.Errorf("%s %s: its VM is running (helper session %s); stop it first: brood session stop %s", op, s.ID, s.HelperSession, s.ID)}
}

// noHelper reports whether a dial error means no helper runs (no socket, nobody
// listening): then no VM runs either, since VMs end with the helper.
func noHelper(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED)
}

// vmAlive asks the helper whether the VM of s still runs. An absent helper means no VM.
func (w *Workflow) vmAlive(ctx context.Context, s *session.Session) (bool, error) {
	c, err := w.Helper.Dial(ctx)
	if noHelper(err) {
		return false, nil
	}
	if err != nil {
		return false, w.hinted(err)
	}
	defer c.Close()
	list, err := c.ListSessions(ctx)
	if err != nil {
		return false, fmt.Errorf("list helper sessions: %w", err)
	}
	for _, hs := range list {
		if hs.State == api.SessionStopped {
			continue
		}
		// A session.json from before HelperSession was recorded cannot be matched:
		// any live VM of the user may be its own.
		if hs.ID == s.HelperSession || s.HelperSession == "" {
			return true, nil
		}
	}
	return false, nil
}

// StopVM asks the helper to stop the VM of s; a helper that no longer knows the session
// (or is not running) has no VM to stop. A session without a recorded helper session id
// is ErrNoHelperSession.
func (w *Workflow) StopVM(ctx context.Context, s *session.Session) error {
	ctx, cancel := context.WithTimeout(ctx, helperQueryTimeout)
	defer cancel()
	if !api.ValidSessionID(s.HelperSession) {
		return fmt.Errorf("stop VM: session.json records no helper session id (session from an older brood): %w", ErrNoHelperSession)
	}
	c, err := w.Helper.Dial(ctx)
	if noHelper(err) {
		return nil
	}
	if err != nil {
		return w.hinted(err)
	}
	defer c.Close()
	if err := c.StopVM(ctx, s.HelperSession); err != nil && !api.IsCode(err, api.CodeNotFound) {
		return fmt.Errorf("stop VM of helper session %s: %w", s.HelperSession, err)
	}
	return nil
}

// Stop stops the VM of the session s marked running (Settle first: a VM already gone
// only needs the state fixed) and marks s stopped. It reports whether s was running.
func (w *Workflow) Stop(ctx context.Context, s *session.Session) (bool, error) {
	if s.State != session.StateRunning {
		return false, nil
	}
	if err := w.Settle(ctx, s, "session stop", true); err != nil {
		return true, err
	}
	if s.State == session.StateRunning {
		if err := w.StopVM(ctx, s); err != nil {
			return true, fmt.Errorf("session stop %s: %w", s.ID, err)
		}
		if err := s.SetState(session.StateStopped); err != nil {
			return true, fmt.Errorf("session stop: %w", err)
		}
	}
	return true, nil
}

// Discard removes the session directory of s (snapshot, manifest, journal, records). A
// session marked running is settled first: its live VM refuses (a *RefusedError) unless
// force, which stops the VM first. It reports whether it stopped a VM; when stopping
// fails the session is kept.
func (w *Workflow) Discard(ctx context.Context, s *session.Session, force bool) (stoppedVM bool, err error) {
	if s.State == session.StateRunning {
		if err := w.Settle(ctx, s, "session rm", force); err != nil {
			return false, err
		}
		if s.State == session.StateRunning { // force: the VM is running
			if err := w.StopVM(ctx, s); err != nil {
				return false, fmt.Errorf("session rm %s: %w; the session is kept", s.ID, err)
			}
			stoppedVM = true
		}
	}
	if err := session.Remove(s.ID); err != nil {
		return stoppedVM, fmt.Errorf("session rm: %w", err)
	}
	return stoppedVM, nil
}

// StateDirs lists brood's own state directory (the parent of the sessions directory,
// $BROOD_STATE_DIR or $XDG_STATE_HOME/brood), for snapshot.Options.SkipDirs: a workspace
// that contains it (--workspace ~) must never copy sessions into a new snapshot.
func StateDirs() []string {
	root, err := session.Root()
	if err != nil {
		return nil
	}
	return []string{filepath.Dir(root)}
}

// SnapshotReport returns one line per path the snapshot excluded, skipped or sanitized
// (dryRun: "would exclude", ...), names escaped, for the caller to print.
func SnapshotReport(rep *snapshot.Report, dryRun bool) []string {
	verb := [3]string{"excluded", "skipped", "sanitized"}
	if dryRun {
		verb = [3]string{"would exclude", "would skip", "would sanitize"}
	}
	var out []string
	for _, it := range rep.Excluded {
		out = append(out, fmt.Sprintf("%s %s (%s)", verb[0], diff.Escape(it.Path), it.Why))
	}
	for _, it := range rep.Skipped {
		out = append(out, fmt.Sprintf("%s %s (%s)", verb[1], diff.Escape(it.Path), it.Why))
	}
	for _, sf := range rep.Sanitized {
		if sf.Note != "" {
			out = append(out, fmt.Sprintf("%s %s: %s", verb[2], diff.Escape(sf.Path), sf.Note))
		}
		for _, r := range sf.Removed {
			if r.Rewritten {
				out = append(out, fmt.Sprintf("%s %s: %s: credentials removed (the URL is kept): %s", verb[2], diff.Escape(sf.Path), diff.Escape(r.Key), r.Reason))
				continue
			}
			out = append(out, fmt.Sprintf("%s %s: removed %s (%s)", verb[2], diff.Escape(sf.Path), diff.Escape(r.Key), r.Reason))
		}
	}
	return out
}
